//! A channel outlives its connection: after the server is killed (`kill -9`) and
//! started again on the same port, the same `Channel` and its clones answer again
//! without the caller reconnecting; a lazy channel made before its server is up
//! works once the server is. Over RC and UD.

use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::{Code, Request, Status};
use tests::{path, ChildTest, Echo, EchoService};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

const CHILD: &str = "RDMA_RPC_TEST_RECONNECT_SERVER";

/// Serves the echo service on 127.0.0.1:`port` (0: any) until `stop` completes.
async fn serve_on(port: u16, stop: impl std::future::Future<Output = ()> + Send + 'static) -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind 127.0.0.1");
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        Server::builder()
            .add_service(EchoService)
            .serve_with_listener(listener, stop)
            .await
            .expect("server runs");
    });
    port
}

/// In the child: serve on the port the parent names until stdin closes, printing
/// the port first. In a normal test run: does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a child process"]
async fn child_server() {
    let Some(port) = std::env::var_os(CHILD) else {
        return;
    };
    let port: u16 = port.to_str().unwrap().parse().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let port = serve_on(port, async {
        let _ = rx.await;
    })
    .await;
    println!("PORT {port}");
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    let _ = tx.send(());
}

async fn echo(ch: &Channel, id: u64) -> Result<u64, Status> {
    let mut g = Grpc::new(ch.clone());
    let r = g
        .unary::<Echo, Echo>(Request::new(Echo { id, data: vec![7] }), path("Echo"))
        .await?;
    Ok(r.into_inner().id)
}

/// Calls until one succeeds, at most `within`; returns how long it took. A failed
/// call fails fast (`UNAVAILABLE`), so the loop paces itself with a short pause.
async fn until_answered(ch: &Channel, within: Duration) -> Duration {
    let t0 = Instant::now();
    let mut last = None;
    while t0.elapsed() < within {
        match echo(ch, 9).await {
            Ok(id) => {
                assert_eq!(id, 9);
                return t0.elapsed();
            }
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                last = Some(e);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no answer within {within:?}; last error {last:?}");
}

async fn survives_a_server_restart(scheme: &str) {
    tests::init_tracing();
    let mut first = ChildTest::spawn("child_server", (CHILD, "0"));
    let port: u16 = first.read_tagged("PORT ").await.parse().unwrap();
    let ch = Channel::connect(format!("{scheme}://127.0.0.1:{port}"))
        .await
        .unwrap();
    let clone = ch.clone();
    assert_eq!(echo(&ch, 1).await.unwrap(), 1);

    first.child.kill().await.unwrap();
    // While the server is gone, calls fail UNAVAILABLE (the connection is lost,
    // then dialing is refused), and fast.
    let t0 = Instant::now();
    let e = echo(&ch, 2).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());

    let port_s = port.to_string();
    let mut second = ChildTest::spawn("child_server", (CHILD, port_s.as_str()));
    assert_eq!(second.read_tagged("PORT ").await, port_s);
    // The same channel, and its clone, answer again by themselves.
    let took = until_answered(&ch, Duration::from_secs(5)).await;
    println!("{scheme}: answered {took:?} after the restarted server listened");
    assert_eq!(echo(&clone, 3).await.unwrap(), 3);
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rc_channel_survives_a_server_killed_and_restarted() {
    survives_a_server_restart("rdma").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ud_channel_survives_a_server_killed_and_restarted() {
    survives_a_server_restart("rdma+ud").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_channel_made_before_its_server_works_once_the_server_is_up() {
    tests::init_tracing();
    // A port nobody listens on (bound, then released).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let ch = Endpoint::from_shared(format!("rdma://127.0.0.1:{port}"))
        .unwrap()
        .connect_lazy();
    let e = echo(&ch, 1).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("cannot connect"), "{e:?}");

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    assert_eq!(
        serve_on(port, async {
            let _ = stopped.await;
        })
        .await,
        port
    );
    until_answered(&ch, Duration::from_secs(5)).await;
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_fails_at_once_when_no_server_listens() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = Channel::connect(format!("rdma://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "transport error", "tonic's words");
    assert!(format!("{e:?}").contains("cannot connect"), "{e:?}");
}
