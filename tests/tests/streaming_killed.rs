//! Cross-process: the streaming server runs as a child process (this test binary
//! re-executed with an environment variable); killing it must end every open
//! stream `UNAVAILABLE` and wake a client writer blocked on the stream's credits.

use std::time::Duration;

use rpc_core::transport::{Channel, Server};
use rpc_core::Code;
use tests::raw_stream::{next, open, CountSource, Seen, StreamService, Witness};
use tests::ChildTest;
use tokio::io::AsyncReadExt;

const CHILD: &str = "RDMA_RPC_TEST_CHILD_STREAM_SERVER";

/// In the child: serve `test.Stream` until stdin closes, printing the port first.
/// In a normal test run: does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a child process"]
async fn child_stream_server() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("PORT {}", listener.local_addr().unwrap().port());
    Server::builder()
        .add_service(StreamService)
        .serve_with_listener(listener, async {
            let mut sink = Vec::new();
            let _ = tokio::io::stdin().read_to_end(&mut sink).await;
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_server_ends_every_open_stream_unavailable() {
    tests::init_tracing();
    let mut child = ChildTest::spawn("child_stream_server", (CHILD, "1"));
    let port: u16 = child.read_tagged("PORT ").await.parse().unwrap();
    let mut ch = Channel::connect(format!("rdma://127.0.0.1:{port}"))
        .await
        .unwrap();

    // A server stream being read, and a client stream whose writer is blocked on
    // credits (the handler never reads).
    let r = open(
        &mut ch,
        "Endless",
        401,
        &[1],
        None,
        CountSource::boxed(0, 0, 0, None),
    )
    .await
    .unwrap();
    let mut reading = r.messages;
    assert!(next(&mut reading).await.unwrap().is_ok());
    let mut w = Witness::new(402);
    let mut ch2 = ch.clone();
    let blocked = tokio::spawn(async move {
        open(
            &mut ch2,
            "Block",
            402,
            &[],
            None,
            CountSource::boxed(402, u64::MAX, 100, None),
        )
        .await
    });
    w.wait_for("the window's worth sent", |s| *s == Seen::Polled(16))
        .await;

    child.child.kill().await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match next(&mut reading).await {
                Some(Ok(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the stream being read ends");
    let e = end.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    let e = tokio::time::timeout(Duration::from_secs(10), blocked)
        .await
        .expect("the blocked call ends")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    w.wait_for("the blocked client producer dropped", |s| {
        *s == Seen::ProducerDropped
    })
    .await;
}
