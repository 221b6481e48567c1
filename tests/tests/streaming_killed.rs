//! Cross-process: the streaming server runs as a child process (this test binary
//! re-executed with an environment variable); killing it must end every open
//! stream `UNAVAILABLE` and wake a client writer blocked on the stream's credits.

use rpc_core::transport::{Channel, Server};
use tests::raw_stream::{
    assert_both_end_unavailable, next, open, serve_stream_until_stdin_closes, CountSource, Seen,
    Witness,
};
use tests::ChildTest;

const CHILD: &str = "RDMA_RPC_TEST_CHILD_STREAM_SERVER";

/// In the child: serve `test.Stream` until stdin closes, printing the port first.
/// In a normal test run: does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a child process"]
async fn child_stream_server() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    serve_stream_until_stdin_closes(Server::builder()).await;
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
    assert_both_end_unavailable(&mut reading, blocked).await;
    w.wait_for("the blocked client producer dropped", |s| {
        *s == Seen::ProducerDropped
    })
    .await;
}
