//! Cross-process: the server runs as a child process (this test binary re-executed
//! with an environment variable); killing it must end in-flight calls UNAVAILABLE.

use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Request};
use tests::{path, serve_echo, ChildTest, Echo};
use tokio::io::AsyncReadExt;

const CHILD: &str = "RDMA_RPC_TEST_CHILD_SERVER";

/// In the child: serve until stdin closes (the parent exited or let go), printing the
/// port first. In a normal test run: does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a child process"]
async fn child_server() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let stop = async {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    };
    let (addr, task) = serve_echo(Server::builder(), stop).await;
    println!("PORT {}", addr.port());
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_server_ends_in_flight_calls_unavailable() {
    tests::init_tracing();
    let mut child = ChildTest::spawn("child_server", (CHILD, "1"));
    let port: u16 = child.read_tagged("PORT ").await.parse().unwrap();

    let ch = Channel::connect(format!("rdma://127.0.0.1:{port}"))
        .await
        .unwrap();
    let mut g = Grpc::new(ch.clone());
    let ok = g
        .unary::<Echo, Echo>(
            Request::new(Echo {
                id: 5,
                data: vec![1],
            }),
            path("Echo"),
        )
        .await
        .unwrap();
    assert_eq!(ok.into_inner().id, 5);

    // Calls that the server holds for a minute, then the server dies.
    let mut calls = Vec::new();
    for i in 0..8 {
        let mut g = Grpc::new(ch.clone());
        calls.push(tokio::spawn(async move {
            g.unary::<Echo, Echo>(
                Request::new(Echo {
                    id: 60_000 + i,
                    data: vec![],
                }),
                path("Sleep"),
            )
            .await
        }));
    }
    child.child.kill().await.unwrap();
    let t0 = Instant::now();
    for c in calls {
        let e = tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .expect("every in-flight call ends")
            .unwrap()
            .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
        // Whichever noticed first (the handshake connection closing, or the queue
        // pair's failed work), the message says the server is gone; a call not yet
        // sent when the connection failed says that dialling again failed.
        let m = e.message();
        assert!(
            m == "the server closed the connection"
                || m.starts_with("connection to the server lost (")
                || m.starts_with("cannot connect to 127.0.0.1:"),
            "{e:?}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(10));
    // And new calls fail fast too.
    let e = g
        .unary::<Echo, Echo>(Request::new(Echo::default()), path("Echo"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
}
