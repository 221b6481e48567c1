//! Cross-process: a client that goes silent mid-call (a child process stopped with
//! SIGSTOP, its connection open, its own deadline never enforced) must not keep a
//! server stream running past the call's deadline. The server ends the call on its
//! own clock: the producer (blocked on the credits the silent client never grants)
//! is dropped, and the handler's inbound ends `DEADLINE_EXCEEDED` from the server's
//! timer, not from a client `RESET`.

use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use rpc_core::client::OutgoingStream;
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Extensions, MetadataMap, Response, Status};
use tests::raw_stream::{
    next, open, read_all, ChanSource, CountSource, Seen, StreamService, Witness,
};
use tests::ChildTest;
use tokio::sync::oneshot;
use tower::{Service, ServiceExt};

const CHILD: &str = "RDMA_RPC_TEST_CHILD_SILENT_CLIENT";
const TAG: u64 = 901;
/// The call's deadline: long enough for the child to stop itself well before it,
/// and well short of the ~4.3 s after which the server's RC retries would declare
/// the stopped client dead (a different ending, which this test must not see).
const DEADLINE: Duration = Duration::from_millis(1500);

/// How the handler's inbound half ended (the server side of the test).
static INBOUND_END: Mutex<Option<oneshot::Sender<Result<(), Status>>>> = Mutex::new(None);

/// `test.Deadline/Pour`: reads its inbound until it ends (reporting how), and
/// answers with an endless stream of 1 KiB messages (its polls and its drop are
/// reported under [`TAG`]).
#[derive(Clone)]
struct Pour;

impl NamedService for Pour {
    const NAME: &'static str = "test.Deadline";
}

impl Service<ServerCall> for Pour {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut call: ServerCall) -> Self::Future {
        Box::pin(async move {
            let mut inbound = call
                .take_inbound()
                .ok_or_else(|| Status::internal("not a streaming call"))?;
            tokio::spawn(async move {
                let end = loop {
                    match next(&mut inbound).await {
                        Some(Ok(_)) => continue,
                        None => break Ok(()),
                        Some(Err(s)) => break Err(s),
                    }
                };
                if let Some(tx) = INBOUND_END.lock().unwrap().take() {
                    let _ = tx.send(end);
                }
            });
            let source = CountSource::boxed(TAG, u64::MAX, 1024, None);
            Ok(Response::new(ReplyBody::Stream(source)))
        })
    }
}

/// In the child: opens a bidirectional `Pour` with a deadline, never reads or
/// sends, and says so; the parent then stops it (SIGSTOP): a client gone silent,
/// its connection still up. In a normal test run: does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a child process"]
async fn child_silent_client() {
    let Some(addr) = std::env::var_os(CHILD) else {
        return;
    };
    let mut ch = Channel::connect(format!("rdma://{}", addr.to_str().unwrap()))
        .await
        .unwrap();
    // A source that neither sends nor ends: the server's inbound stays open.
    let (_keep, source) = ChanSource::new(0, 1);
    ServiceExt::<OutgoingStream>::ready(&mut ch).await.unwrap();
    let call = ch
        .call(OutgoingStream {
            path: "/test.Deadline/Pour",
            metadata: MetadataMap::new(),
            timeout: Some(DEADLINE),
            extensions: Extensions::new(),
            messages: source.boxed(),
        })
        .await
        .unwrap();
    println!("OPEN");
    // The parent stops this process now (SIGSTOP) and kills it at the end.
    std::future::pending::<()>().await;
    drop(call);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_ends_a_silent_clients_stream_at_the_deadline() {
    let (tx, inbound_end) = oneshot::channel();
    *INBOUND_END.lock().unwrap() = Some(tx);
    let mut w = Witness::new(TAG);
    let (addr, _stop) = tests::serve_router(Server::builder().add_service(Pour)).await;
    let mut child = ChildTest::spawn("child_silent_client", (CHILD, &addr.to_string()));
    child.read_tagged("OPEN").await;
    let pid = child.child.id().expect("the child runs").to_string();
    let stopped = tokio::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .await
        .expect("running kill -STOP on the child");
    assert!(stopped.success(), "kill -STOP {pid}: {stopped:?}");
    // The child reads nothing: the producer sends what it may, then waits (for
    // the call's credits, or for send slots the stopped client never completes).
    w.wait_for("the producer started", |s| *s == Seen::Polled(1))
        .await;
    let mut polled = 1;
    loop {
        match w
            .wait_for("the producer dropped at the deadline", |_| true)
            .await
        {
            Seen::Polled(n) => polled = n,
            Seen::ProducerDropped => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    eprintln!("producer polled {polled} times before it was dropped");
    let end = tokio::time::timeout(Duration::from_secs(10), inbound_end)
        .await
        .expect("the handler's inbound ends")
        .unwrap();
    if let Ok(Some(exit)) = child.child.try_wait() {
        panic!("the child did not stay stopped: {exit:?}");
    }
    let s = end.expect_err("the call ended by its deadline, not OK");
    assert_eq!(s.code(), Code::DeadlineExceeded, "{s:?}");
    assert!(
        s.message().contains("on the server"),
        "ended by the server's own timer, not a client RESET: {s:?}"
    );
    // The window: 1 MiB of charges (a message's length plus 32 B), a message
    // beginning while credit is left, plus one a writer may hold back.
    let window = (1u64 << 20).div_ceil(1024 + 32) + 1;
    assert!(
        polled <= window,
        "the producer never ran past the window ({polled} > {window})"
    );
    child.child.kill().await.unwrap();
}

/// `Server::timeout` covers a streaming call whole, not only its handler's
/// answer: an endless server stream, read as fast as it comes by a client that set
/// no deadline, ends `DEADLINE_EXCEEDED` from the server's clock, every message
/// before it intact, and its producer is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_timeout_ends_a_stream_after_its_handler_returned() {
    let router = Server::builder()
        .timeout(Duration::from_millis(300))
        .add_service(StreamService);
    let (addr, _stop) = tests::serve_router(router).await;
    let mut ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let mut w = Witness::new(902);
    let nothing = CountSource::boxed(0, 0, 0, None);
    let r = open(&mut ch, "Endless", 902, &[1], None, nothing)
        .await
        .expect("the handler returned its stream at once, well within the timeout");
    let mut inbound = r.messages;
    let (msgs, end) = tokio::time::timeout(Duration::from_secs(20), read_all(&mut inbound))
        .await
        .expect("the server's timeout ended the stream (not still running after 20 s)");
    let s = end.expect_err("an endless stream ends only by the timeout");
    assert_eq!(s.code(), Code::DeadlineExceeded, "{s:?}");
    assert!(s.message().contains("on the server"), "{s:?}");
    assert!(!msgs.is_empty(), "messages flowed until then");
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(m.id, i as u64, "in order, none lost");
    }
    w.wait_for("the producer dropped at the timeout", |s| {
        *s == Seen::ProducerDropped
    })
    .await;
}
