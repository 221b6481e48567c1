//! Connections leave nothing behind: after rounds of RC clients that connect, call
//! and leave, the server's device holds as many QPs and memory regions as before
//! (each connection's QP, send ring and state live exactly as long as it), and so
//! does the clients' device.

use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;
use rpc_transport::{Device, SoftConfig, SoftStats};
use tests::{init_tracing, path, serve_echo, Echo};
use tokio::sync::oneshot;

const ROUNDS: usize = 3;
const CLIENTS: usize = 40;

/// (live QPs, live MRs) of a soft device.
fn live(dev: &Device) -> (u64, u64) {
    let s: SoftStats = dev.soft_stats().expect("a soft device");
    (s.live_qps, s.live_mrs)
}

/// Waits (30 s at most) until `dev` holds at most `want` QPs and MRs.
async fn settles_at(dev: &Device, want: (u64, u64), what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    loop {
        let now = live(dev);
        if now.0 <= want.0 && now.1 <= want.1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: (QPs, MRs) stayed at {now:?}, above {want:?}"
        );
        tick.tick().await;
    }
}

async fn call(ch: &Channel, id: u64) {
    let mut g = Grpc::new(ch.clone());
    let r = g
        .unary::<Echo, Echo>(
            Request::new(Echo {
                id,
                data: vec![7; 100],
            }),
            path("Echo"),
        )
        .await
        .unwrap_or_else(|e| panic!("call {id}: {e}"));
    assert_eq!(r.into_inner().id, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_of_rc_clients_leave_the_servers_qps_and_regions_where_they_were() {
    init_tracing();
    let server_dev = Device::open_soft(SoftConfig::default()).expect("soft device");
    let (tx, rx) = oneshot::channel::<()>();
    let (addr, server) = serve_echo(Server::builder().rdma_device(server_dev.clone()), async {
        let _ = rx.await;
    })
    .await;
    let uri = format!("rdma://{addr}");
    // One client first, so that everything made once per server or process exists.
    // Once it has connected the server is set up; once its one QP is gone, it left.
    let ch = Channel::connect(uri.clone()).await.expect("connect");
    call(&ch, 0).await;
    let (warm_qps, warm_mrs) = live(&server_dev);
    drop(ch);
    settles_at(
        &server_dev,
        (warm_qps - 1, warm_mrs - 1),
        "server after the warm-up",
    )
    .await;
    let base = live(&server_dev);
    let client_dev = rpc_transport::msg::open_device(None).expect("the default device");
    settles_at(&client_dev, (0, 0), "clients after the warm-up").await;
    for round in 0..ROUNDS {
        let mut channels = Vec::new();
        for i in 0..CLIENTS {
            let ch = Channel::connect(uri.clone())
                .await
                .unwrap_or_else(|e| panic!("round {round}, client {i}: {e:?}"));
            call(&ch, i as u64).await;
            channels.push(ch);
        }
        // Each connection holds at least its QP and its send ring on the server.
        let (qps, mrs) = live(&server_dev);
        assert!(
            qps >= base.0 + CLIENTS as u64 && mrs >= base.1 + CLIENTS as u64,
            "round {round}: {CLIENTS} clients connected, server (QPs, MRs) {:?}, \
             {base:?} with none",
            (qps, mrs)
        );
        drop(channels);
        settles_at(&server_dev, base, &format!("server after round {round}")).await;
        settles_at(&client_dev, (0, 0), &format!("clients after round {round}")).await;
    }
    let _ = tx.send(());
    server.await.expect("server stops");
}
