//! Streaming calls at their edges, end to end over the soft provider (RC on
//! 127.0.0.1): brpc's stream bugs designed out (a writer blocked on credits is
//! woken when its peer goes, an oversized message is refused to its sender, close
//! drains in-flight messages, a handler blocked inside does not hold up teardown),
//! a slow consumer stops only its own stream, shutdown, and UD channels.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rpc_core::stream::BoxMessageSource;
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::Code;
use tests::raw_stream::{
    next, open, read_all, ChanSource, CountSource, Seen, StreamService, Witness,
};
use tests::Echo;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Serves `test.Stream` on 127.0.0.1 until `stop` is used; the task ends when the
/// server returned.
async fn serve(builder: Server) -> (SocketAddr, oneshot::Sender<()>, JoinHandle<()>) {
    tests::init_tracing();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        builder
            .add_service(StreamService)
            .serve_with_listener(listener, async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (addr, stop, task)
}

fn nothing() -> BoxMessageSource {
    CountSource::boxed(0, 0, 0, None)
}

/// A source that yields messages of `len` bytes for as long as it is polled.
fn endless(tag: u64, len: usize) -> BoxMessageSource {
    CountSource::boxed(tag, u64::MAX, len, None)
}

/// The most messages with `data` bytes of payload a producer can be polled for
/// while its reader takes none: the window (`STREAM_WINDOW`, 1 MiB of charges,
/// each a message's length plus `MESSAGE_CHARGE`, 32 B) begins messages while
/// credit is left, plus the one a writer may hold that did not fit its frame.
/// The encoded message is a little longer than `data`: this bound is the loose side.
fn window_bound(data: u64) -> u64 {
    (1u64 << 20).div_ceil(data + 32) + 1
}

fn max_polled(seen: &[Seen]) -> u64 {
    seen.iter()
        .filter_map(|s| match s {
            Seen::Polled(n) => Some(*n),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_blocked_on_credits_is_woken_when_the_server_goes_and_teardown_does_not_wait_on_a_blocked_handler(
) {
    let (addr, stop, server) =
        serve(Server::builder().shutdown_grace_period(Duration::from_millis(300))).await;
    let mut ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let mut w = Witness::new(301);
    // The handler never reads (it blocks inside): the client's producer is polled
    // for the stream's window of messages, then no more.
    let call =
        tokio::spawn(
            async move { open(&mut ch, "Block", 301, &[], None, endless(301, 100)).await },
        );
    w.wait_for("the window's worth produced", |s| *s == Seen::Polled(16))
        .await;
    let t0 = Instant::now();
    stop.send(()).unwrap();
    // The server's teardown does not wait on the blocked handler beyond the grace
    // period, and the writer blocked on credits is woken: its producer is dropped.
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server stops despite a handler blocked inside")
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let e = call.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    w.wait_for("the client's blocked producer dropped", |s| {
        *s == Seen::ProducerDropped
    })
    .await;
    assert_eq!(max_polled(&w.drain()), 0, "not polled after the window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stream_finishes_across_a_graceful_shutdown_with_every_message() {
    let (addr, stop, server) = serve(Server::builder()).await;
    let mut ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let r = open(&mut ch, "Count", 302, &[300, 1000, 0], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    for i in 0..10 {
        assert_eq!(next(&mut inbound).await.unwrap().unwrap().id, i);
    }
    stop.send(()).unwrap();
    // Close drains what is in flight: every message, then the OK end.
    let (rest, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(rest.len(), 290);
    assert_eq!(rest.last().unwrap().id, 299);
    drop(inbound);
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server stops once the stream ended")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_open_past_the_grace_period_ends_unavailable() {
    let (addr, stop, server) =
        serve(Server::builder().shutdown_grace_period(Duration::from_millis(200))).await;
    let mut ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let mut w = Witness::new(303);
    let r = open(&mut ch, "Hold", 303, &[], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    w.wait_for("the client's half ended", |s| {
        *s == Seen::InboundEnded(Ok(0))
    })
    .await;
    stop.send(()).unwrap();
    let e = next(&mut inbound).await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    server.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_refused_and_both_ends_hear_resource_exhausted() {
    let (addr, _stop, _server) = serve(Server::builder().max_message_size(64 * 1024)).await;
    // Client to server: the server's limit (told at the handshake) refuses it.
    let mut ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let mut w = Witness::new(304);
    let (tx, src) = ChanSource::new(304, 1);
    let r = open(&mut ch, "Bidi", 304, &[], None, src.boxed())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let small = Echo {
        id: 0,
        data: vec![1; 1000],
    };
    tx.send(Ok(small.clone())).await.unwrap();
    assert_eq!(next(&mut inbound).await.unwrap().unwrap(), small);
    let big = Echo {
        id: 1,
        data: vec![1; 100_000],
    };
    tx.send(Ok(big)).await.unwrap();
    let e = next(&mut inbound).await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("exceeds the limit"), "{e:?}");
    // The handler's inbound ends so; its producer and the client's are dropped.
    w.wait_for_all(
        "the handler's inbound ended RESOURCE_EXHAUSTED, both producers dropped",
        vec![
            Seen::InboundEnded(Err(Code::ResourceExhausted)),
            Seen::ProducerDropped,
            Seen::ProducerDropped,
        ],
    )
    .await;
    drop(tx);

    // Server to client: the client's limit refuses it; the server's producer is
    // dropped and the client reads the messages before it, then the status.
    let mut small = Endpoint::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .max_message_size(32 * 1024)
        .connect()
        .await
        .unwrap();
    let mut w = Witness::new(305);
    let r = open(&mut small, "Count", 305, &[3, 40_000, 0], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    assert!(msgs.is_empty());
    let e = end.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    w.wait_for("the server's producer dropped", |s| {
        *s == Seen::ProducerDropped
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_stops_only_its_own_stream() {
    let (addr, _stop, _server) = serve(Server::builder()).await;
    let mut ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    // A client that does not read one stream: the server fills its window, then
    // stops producing for it alone.
    let mut w = Witness::new(306);
    let unread = open(&mut ch, "Endless", 306, &[4], None, nothing())
        .await
        .unwrap();
    w.wait_for("the window's worth produced", |s| *s == Seen::Polled(16))
        .await;
    // A server handler that does not read: the client fills that window, then
    // stops producing for it alone.
    let mut w2 = Witness::new(307);
    let mut ch2 = ch.clone();
    let blocked =
        tokio::spawn(
            async move { open(&mut ch2, "Block", 307, &[], None, endless(307, 100)).await },
        );
    w2.wait_for("the window's worth sent", |s| *s == Seen::Polled(16))
        .await;
    // Meanwhile other streams on the same connection move, both ways.
    let r = open(&mut ch, "Count", 308, &[2000, 100, 0], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(msgs.len(), 2000);
    let r = open(
        &mut ch,
        "Sum",
        309,
        &[],
        None,
        CountSource::boxed(309, 2000, 100, None),
    )
    .await
    .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(msgs[0].id, 2000);
    // The stalled streams were never polled beyond their windows.
    let (server, client) = (max_polled(&w.drain()), max_polled(&w2.drain()));
    assert!(
        server <= window_bound(4 * 1024),
        "server producer ran ahead: {server}"
    );
    assert!(
        client <= window_bound(100),
        "client producer ran ahead: {client}"
    );
    drop(unread);
    w.wait_for("the unread stream's producer dropped", |s| {
        *s == Seen::ProducerDropped
    })
    .await;
    blocked.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_drops_its_inbound_does_not_stall_the_client() {
    let (addr, _stop, _server) = serve(Server::builder()).await;
    let mut ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    // 200 messages (more than the window) to a handler that dropped its inbound
    // and answers once all 200 were produced: they are discarded and their
    // credits come back, so the client's source runs to its end and the answer
    // comes. A dropped inbound that stalled the client would stop it at a window.
    let mut w = Witness::new(310);
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        let r = open(
            &mut ch,
            "Ignore",
            310,
            &[200],
            None,
            CountSource::boxed(310, 200, 10, None),
        )
        .await
        .unwrap();
        let mut inbound = r.messages;
        read_all(&mut inbound).await
    })
    .await;
    let (msgs, end) =
        answered.expect("the client was not stalled: every message went, the answer came");
    end.unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].id, 310);
    w.wait_for("every client message produced", |s| *s == Seen::Polled(200))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ud_channel_streams_over_rc_and_fails_clearly_without_it() {
    let (addr, _stop, _server) = serve(Server::builder()).await;
    let mut ch = Channel::connect(format!("rdma+ud://{addr}")).await.unwrap();
    let r = open(&mut ch, "Count", 311, &[5, 3000, 0], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(msgs.len(), 5);

    let (addr, _stop, _server) = serve(Server::builder().accept_rc(false)).await;
    if !rpc_transport::msg::open_device(None).unwrap().caps().ud {
        // No UD, and the server takes no RC: the channel cannot connect at all.
        let e = Channel::connect(format!("rdma+ud://{addr}"))
            .await
            .unwrap_err();
        assert!(format!("{e:?}").contains("device has no UD"), "{e:?}");
        return;
    }
    let mut ch = Channel::connect(format!("rdma+ud://{addr}")).await.unwrap();
    let e = open(&mut ch, "Count", 312, &[5, 3000, 0], None, nothing())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    assert!(e.message().contains("accept_rc(false)"), "{e:?}");
}
