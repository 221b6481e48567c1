//! Stream messages by reference (RDMA Read "rendezvous", `docs/large-messages.md`):
//! messages above the threshold, both ways, arrive byte for byte and in order among
//! small ones; the regions they were lent from and read into all come back when the
//! stream ends, when it is cancelled mid-stream, and when the server dies under it.

use std::time::{Duration, Instant};

use rpc_core::transport::{Channel, Endpoint, RendezvousStats, Server};
use tests::raw_stream::{
    assert_both_end_unavailable, next, open, read_all, serve_stream_until_stdin_closes, ChanSource,
    CountSource, Seen, StreamService, Witness,
};
use tests::{ChildTest, Echo};

const THRESHOLD: usize = 32 * 1024;
const MAX_MESSAGE: usize = 20 * 1024 * 1024;
const CHILD: &str = "RDMA_RPC_TEST_CHILD_LARGE_STREAM_SERVER";

/// Bytes that differ at every offset and between messages.
fn pattern(id: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(id * 7) as u8)
        .collect()
}

/// A data length whose encoded `Echo` of `id` is `encoded` bytes long (at most).
fn data_len_for(id: u64, encoded: usize) -> usize {
    let mut n = encoded;
    while n > 0
        && prost::Message::encoded_len(&Echo {
            id,
            data: vec![0; n],
        }) > encoded
    {
        n -= 1;
    }
    n
}

async fn serve(stats: &RendezvousStats) -> (String, tokio::sync::oneshot::Sender<()>) {
    let (addr, stop) = tests::serve_router(
        Server::builder()
            .max_message_size(MAX_MESSAGE)
            .rendezvous_threshold(THRESHOLD)
            .rendezvous_stats(stats.clone())
            .add_service(StreamService),
    )
    .await;
    (format!("rdma://{addr}"), stop)
}

async fn channel(uri: &str, stats: &RendezvousStats) -> Channel {
    Endpoint::from_shared(uri.to_string())
        .unwrap()
        .max_message_size(MAX_MESSAGE)
        .rendezvous_threshold(THRESHOLD)
        .rendezvous_stats(stats.clone())
        .connect()
        .await
        .unwrap()
}

/// Waits (within 20 s, on the pools' own counts) until every region of `stats` is
/// back in its pool.
async fn all_back(what: &str, stats: &RendezvousStats) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = stats.get();
        if (s.in_use, s.regions_in_use, s.waiting) == (0, 0, 0) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: regions not back: {s:?}");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidi_messages_around_the_threshold_and_up_to_16_mib_arrive_byte_for_byte_in_order() {
    let (srv, cli) = (RendezvousStats::new(), RendezvousStats::new());
    let (uri, _stop) = serve(&srv).await;
    let mut ch = channel(&uri, &cli).await;
    // Small messages between large ones, and around the threshold by encoded
    // length (T and below inline or in chunks, above by reference).
    let mut sizes = vec![5usize];
    for (k, enc) in [THRESHOLD - 1, THRESHOLD, THRESHOLD + 1, THRESHOLD + 2]
        .into_iter()
        .enumerate()
    {
        sizes.push(data_len_for(100 + k as u64, enc));
    }
    sizes.extend([0, 64 << 10, 3, 1 << 20, 7, (4 << 20) + 3, 1, 16 << 20, 11]);
    let (tx, src) = ChanSource::new(1, 4);
    // Every message goes through the client's stream to the server's handler, which
    // echoes it back on its own stream: both directions, by reference above T.
    let r = open(&mut ch, "Bidi", 1, &[], None, src.boxed())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let msgs: Vec<Echo> = sizes
        .iter()
        .enumerate()
        .map(|(k, &len)| Echo {
            id: 100 + k as u64,
            data: pattern(100 + k as u64, len),
        })
        .collect();
    let sent = msgs.clone();
    let writer = tokio::spawn(async move {
        for m in sent {
            tx.send(Ok(m)).await.unwrap();
        }
        // Dropping `tx` ends the client's half: the echo then ends OK.
    });
    let (got, end) = read_all(&mut inbound).await;
    writer.await.unwrap();
    end.unwrap();
    assert_eq!(got.len(), msgs.len(), "every message came back");
    for (g, m) in got.iter().zip(&msgs) {
        assert_eq!(g.id, m.id, "in order");
        assert!(g.data == m.data, "{} bytes came back changed", m.data.len());
    }
    let (c, s) = (cli.get(), srv.get());
    assert!(
        c.registrations > 0 && s.registrations > 0,
        "large messages went by reference both ways: {c:?} {s:?}"
    );
    all_back("client", &cli).await;
    all_back("server", &srv).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stream_of_large_messages_arrives_whole_and_gives_its_regions_back() {
    let (srv, cli) = (RendezvousStats::new(), RendezvousStats::new());
    let (uri, _stop) = serve(&srv).await;
    let mut ch = channel(&uri, &cli).await;
    // `Count`: 40 messages of 256 KiB, each filled with its id % 251.
    let len = 256 << 10;
    let r = open(
        &mut ch,
        "Count",
        2,
        &[40, len as u64, 0],
        None,
        CountSource::boxed(0, 0, 0, None),
    )
    .await
    .unwrap();
    let mut inbound = r.messages;
    let (got, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(got.len(), 40);
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.id, i as u64);
        assert!(m.data.len() == len && m.data.iter().all(|&b| b == (i % 251) as u8));
    }
    assert!(srv.get().registrations > 0, "lent by the server");
    assert!(cli.get().registrations > 0, "read by the client");
    drop(got);
    all_back("client", &cli).await;
    all_back("server", &srv).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_mid_stream_returns_every_region_both_ways() {
    let (srv, cli) = (RendezvousStats::new(), RendezvousStats::new());
    let (uri, _stop) = serve(&srv).await;
    let mut ch = channel(&uri, &cli).await;

    // A server stream of 512 KiB messages, read twice, then dropped (a `RESET`)
    // while more are lent and being read.
    let r = open(
        &mut ch,
        "Endless",
        3,
        &[512],
        None,
        CountSource::boxed(0, 0, 0, None),
    )
    .await
    .unwrap();
    let mut inbound = r.messages;
    for _ in 0..2 {
        let m = next(&mut inbound).await.unwrap().unwrap();
        assert_eq!(m.data.len(), 512 << 10);
    }
    drop(inbound);
    all_back("client, after the server stream's cancel", &cli).await;
    all_back("server, after the server stream's cancel", &srv).await;

    // A client stream of 1 MiB messages to a handler that never reads: the server
    // reads what the window lets in and holds it; then the caller gives up.
    let mut ch2 = ch.clone();
    let blocked = tokio::spawn(async move {
        let source = CountSource::boxed(4, u64::MAX, 1 << 20, None);
        open(&mut ch2, "Block", 4, &[], None, source).await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while srv.get().regions_in_use == 0 {
        assert!(Instant::now() < deadline, "the server read none: {srv:?}");
        tokio::task::yield_now().await;
    }
    blocked.abort();
    let _ = blocked.await;

    // A stream on the same channel still works, and everything came back.
    let r = open(
        &mut ch,
        "Count",
        5,
        &[3, 100_000, 0],
        None,
        CountSource::boxed(0, 0, 0, None),
    )
    .await
    .unwrap();
    let mut inbound = r.messages;
    let (got, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(got.len(), 3);
    all_back("client", &cli).await;
    all_back("server", &srv).await;
}

/// In the child: serve `test.Stream` until stdin closes, printing the port first.
/// In a normal test run: does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a child process"]
async fn child_large_stream_server() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    serve_stream_until_stdin_closes(
        Server::builder()
            .max_message_size(MAX_MESSAGE)
            .rendezvous_threshold(THRESHOLD),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_stream_ends_it_unavailable_with_the_clients_regions_back() {
    tests::init_tracing();
    let cli = RendezvousStats::new();
    let mut child = ChildTest::spawn("child_large_stream_server", (CHILD, "1"));
    let port: u16 = child.read_tagged("PORT ").await.parse().unwrap();
    let mut ch = channel(&format!("rdma://127.0.0.1:{port}"), &cli).await;
    // A server stream of 1 MiB messages by reference, and a client stream of them
    // to a handler that holds them unread.
    let r = open(
        &mut ch,
        "Endless",
        6,
        &[1024],
        None,
        CountSource::boxed(0, 0, 0, None),
    )
    .await
    .unwrap();
    let mut reading = r.messages;
    assert_eq!(
        next(&mut reading).await.unwrap().unwrap().data.len(),
        1 << 20
    );
    let mut w = Witness::new(7);
    let mut ch2 = ch.clone();
    let blocked = tokio::spawn(async move {
        let source = CountSource::boxed(7, u64::MAX, 1 << 20, None);
        open(&mut ch2, "Block", 7, &[], None, source).await
    });
    // The client stream's first message is produced (to be lent), and the server
    // stream's next one waits unread in the client's pool.
    w.wait_for("the client stream's first message", |s| {
        *s == Seen::Polled(1)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while cli.get().regions_in_use == 0 {
        assert!(Instant::now() < deadline, "nothing read: {cli:?}");
        tokio::task::yield_now().await;
    }

    child.child.kill().await.unwrap();
    assert_both_end_unavailable(&mut reading, blocked).await;
    drop(reading);
    all_back("client", &cli).await;
}
