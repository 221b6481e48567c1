//! `serve_with_shutdown` drains as tonic does: no new connections, GOAWAY to every
//! client, calls in flight run to their answers, then the server returns.

use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Request, Status};
use tests::{path, serve_echo, Echo};

fn sleep_call(ch: &Channel, millis: u64) -> tokio::task::JoinHandle<Result<u64, Status>> {
    let mut g = Grpc::new(ch.clone());
    tokio::spawn(async move {
        let r = g
            .unary::<Echo, Echo>(
                Request::new(Echo {
                    id: millis,
                    data: vec![],
                }),
                path("Sleep"),
            )
            .await?;
        Ok(r.into_inner().id)
    })
}

async fn echo(ch: &Channel, id: u64) -> Result<u64, Status> {
    let mut g = Grpc::new(ch.clone());
    Ok(
        g.unary::<Echo, Echo>(Request::new(Echo { id, data: vec![] }), path("Echo"))
            .await?
            .into_inner()
            .id,
    )
}

async fn calls_in_flight_finish_across_shutdown(scheme: &str, first: u64) {
    tests::init_tracing();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, server) = serve_echo(Server::builder(), async {
        let _ = stopped.await;
    })
    .await;
    let ch = Channel::connect(format!("{scheme}://{addr}"))
        .await
        .unwrap();
    let n = if scheme == "rdma" { 50 } else { 24 }; // UD: within its window of 32
    let calls: Vec<_> = (0..n).map(|i| sleep_call(&ch, first + i)).collect();
    // Every sleeping call's handler is running before the signal.
    let t_start = Instant::now();
    while !(0..n).all(|i| tests::sleep_started(first + i)) {
        assert!(
            t_start.elapsed() < Duration::from_secs(10),
            "handlers did not start"
        );
        tokio::task::yield_now().await;
    }

    let t0 = Instant::now();
    stop.send(()).unwrap();
    // New work is refused: a new connection soon fails to connect, and a new call
    // on the draining channel fails UNAVAILABLE instead of starting there.
    let refused = loop {
        match Channel::connect(format!("{scheme}://{addr}")).await {
            Err(e) => break e,
            Ok(_) if t0.elapsed() < Duration::from_secs(1) => tokio::task::yield_now().await,
            Ok(_) => panic!("a connect 1 s after the shutdown signal was accepted"),
        }
    };
    assert!(
        format!("{refused:?}").contains("cannot connect"),
        "{refused:?}"
    );
    // Every call in flight completes.
    for (i, c) in calls.into_iter().enumerate() {
        assert_eq!(c.await.unwrap().unwrap(), first + i as u64);
    }
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("serve_with_shutdown returns once the calls are answered")
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(9), "{:?}", t0.elapsed());
    let e = echo(&ch, 2).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_rc_calls_in_flight_finish_across_serve_with_shutdown() {
    calls_in_flight_finish_across_shutdown("rdma", 1500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ud_calls_in_flight_finish_across_serve_with_shutdown() {
    calls_in_flight_finish_across_shutdown("rdma+ud", 1600).await;
}
