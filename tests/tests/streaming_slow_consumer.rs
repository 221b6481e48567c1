//! The slow-consumer bound, end to end: a reader that takes 64 KiB messages one at
//! a time never has more than a window (`STREAM_WINDOW`, 1 MiB: 16 such messages,
//! or what `initial_stream_window_size` sets) produced ahead of it, whichever side
//! reads, while another stream on the same channel (the same connection) keeps
//! moving. The producers count what they were asked for, so the bound is checked on
//! counts, not on time. Each test runs twice: with the messages by reference (above
//! the rendezvous threshold, the default) and in chunks (the threshold out of
//! reach): the window counts a message by reference as its body, so the bound is
//! the same, but for the one message a writer encodes ahead after one by reference
//! (`AHEAD`).

use rpc_core::transport::{Channel, Endpoint, RendezvousStats, Server};
use tests::raw_stream::{
    next, open, read_all, ChanSource, CountSource, Seen, StreamService, Witness,
};
use tests::Echo;

/// Messages a reader lets its peer send ahead: the engine's `STREAM_WINDOW` of
/// 1 MiB counts each message as its length plus 32 B (`MESSAGE_CHARGE`), and a
/// message begins while credit is left: 16 of 64 KiB.
const WINDOW: u64 = 16;
/// Messages by reference a producer is asked for beyond its window: after one, the
/// writer of a connection's lone stream polls and encodes the next while the
/// reader reads that one.
const AHEAD: u64 = 1;

/// Messages a producer is asked for before its reader took any: its `window`, and
/// the one encoded ahead when they go by reference.
fn asked(by_ref: bool, window: u64) -> u64 {
    if by_ref {
        window + AHEAD
    } else {
        window
    }
}

/// 64 KiB messages: larger than a slot, and than the default rendezvous threshold
/// (32 KiB): one `MSG` each by reference, or several in chunks.
const KIB: u64 = 64;

/// A channel to a `StreamService` whose messages of 64 KiB go `by_ref` or in
/// chunks, both ways, and the client's pool occupancy.
async fn channel(by_ref: bool) -> (Channel, RendezvousStats, tokio::sync::oneshot::Sender<()>) {
    channel_with_windows(by_ref, None, None).await
}

/// [`channel`] with the client's and the server's `initial_stream_window_size`.
async fn channel_with_windows(
    by_ref: bool,
    client_window: Option<u32>,
    server_window: Option<u32>,
) -> (Channel, RendezvousStats, tokio::sync::oneshot::Sender<()>) {
    let threshold = if by_ref {
        rpc_core::transport::DEFAULT_RENDEZVOUS_THRESHOLD
    } else {
        usize::MAX
    };
    let (addr, stop) = tests::serve_router(
        Server::builder()
            .rendezvous_threshold(threshold)
            .initial_stream_window_size(server_window)
            .add_service(StreamService),
    )
    .await;
    let stats = RendezvousStats::new();
    let ch = Endpoint::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .rendezvous_threshold(threshold)
        .rendezvous_stats(stats.clone())
        .initial_stream_window_size(client_window)
        .connect()
        .await
        .unwrap();
    (ch, stats, stop)
}

/// Tags apart for the two variants of a test (they run at once, and a tag names
/// one witness).
fn tags(by_ref: bool) -> u64 {
    if by_ref {
        0
    } else {
        10
    }
}

/// The messages went the way the test meant (regions are registered only for
/// messages by reference).
fn went(by_ref: bool, stats: &RendezvousStats) {
    let s = stats.get();
    assert_eq!(s.registrations > 0, by_ref, "by reference: {by_ref}; {s:?}");
}

/// The most messages a producer was asked for, among `seen` (0 if none).
fn most_polled(seen: &[Seen]) -> u64 {
    seen.iter()
        .filter_map(|s| match s {
            Seen::Polled(n) => Some(*n),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Another stream on `ch` moves `n` 64 KiB messages from the server, completely.
async fn others_move(ch: &mut Channel, tag: u64, n: u64) {
    let nothing = CountSource::boxed(0, 0, 0, None);
    let r = open(ch, "Count", tag, &[n, KIB * 1024, 0], None, nothing)
        .await
        .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(msgs.len() as u64, n, "the other stream moved every message");
}

/// Ten windows' worth move on another stream of `ch` (tag `other`), time for `w`'s
/// producer to run ahead if it would: it was asked for at most `bound` messages.
async fn held_at(ch: &mut Channel, w: &mut Witness, other: u64, bound: u64, reader: &str) {
    others_move(ch, other, 10 * WINDOW).await;
    let asked = most_polled(&w.drain());
    assert!(
        asked <= bound,
        "{asked} messages asked for by {reader} that took none, where the window begins {bound}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_reader_holds_the_server_producer_to_a_window() {
    slow_client_reader(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_reader_holds_the_server_producer_to_a_window_in_chunks() {
    slow_client_reader(false).await;
}

/// `Endpoint::initial_stream_window_size(4 MiB)`: the server's producer runs four
/// windows of the default ahead of a reader that takes nothing, and no further.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_window_of_4_mib_lets_the_server_producer_run_64_messages_ahead() {
    let (mut ch, stats, _stop) = channel_with_windows(true, Some(LARGE_WINDOW), None).await;
    slow_reader_on(&mut ch, 721, asked(true, LARGE)).await;
    went(true, &stats);
}

/// `Server::initial_stream_window_size(4 MiB)`: a client's producer runs four
/// windows of the default ahead of a handler that reads nothing, and no further.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_window_of_4_mib_lets_the_client_producer_run_64_messages_ahead() {
    let (mut ch, stats, _stop) = channel_with_windows(true, None, Some(LARGE_WINDOW)).await;
    reading_nothing_on(&mut ch, 723, asked(true, LARGE)).await;
    went(true, &stats);
}

/// `initial_stream_window_size` of the tests above, and the 64 KiB messages it
/// lets a producer begin: 4 MiB / (64 KiB + 32 B), rounded up.
const LARGE_WINDOW: u32 = 4 << 20;
const LARGE: u64 = 64;

async fn slow_client_reader(by_ref: bool) {
    let (mut ch, stats, _stop) = channel(by_ref).await;
    slow_reader_on(&mut ch, 701 + tags(by_ref), asked(by_ref, WINDOW)).await;
    went(by_ref, &stats);
}

/// A stream from "Endless" (tag `tag`, another stream `tag + 1`) whose reader takes
/// nothing, then one message at a time: `window` messages (see [`asked`]) produced
/// ahead of it, and never more.
async fn slow_reader_on(ch: &mut Channel, tag: u64, window: u64) {
    let mut w = Witness::new(tag);
    let nothing = CountSource::boxed(0, 0, 0, None);
    let r = open(ch, "Endless", tag, &[KIB], None, nothing)
        .await
        .unwrap();
    let mut slow = r.messages;
    w.wait_for("a window's worth produced", |s| *s == Seen::Polled(window))
        .await;
    // Ten windows' worth on another stream of the connection while this one is
    // not read at all: that one moves, and this producer stays where it was.
    held_at(ch, &mut w, tag + 1, window, "a reader").await;
    // Read one at a time: never more than a window produced ahead of the reader.
    for read in 1..=4 * WINDOW {
        let m = next(&mut slow).await.unwrap().unwrap();
        assert_eq!(m.id, read - 1);
        assert_eq!(m.data.len() as u64, KIB * 1024);
        let produced = most_polled(&w.drain());
        assert!(
            produced <= read + window,
            "{produced} produced when the reader had taken {read}"
        );
    }
    drop(slow);
    w.wait_for("the producer dropped with the stream", |s| {
        *s == Seen::ProducerDropped
    })
    .await;
}

/// Encoding ahead is for a connection's lone stream: once another stream is open
/// on the connection, a producer whose reader takes nothing stops at its window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_beside_another_encodes_nothing_ahead() {
    let (mut ch, stats, _stop) = channel(true).await;
    let tag = 731;
    let mut lone = Witness::new(tag);
    let mut beside = Witness::new(tag + 1);
    let nothing = || CountSource::boxed(0, 0, 0, None);
    let first = open(&mut ch, "Endless", tag, &[KIB], None, nothing())
        .await
        .unwrap();
    lone.wait_for("the lone stream's window and one ahead", |s| {
        *s == Seen::Polled(asked(true, WINDOW))
    })
    .await;
    let second = open(&mut ch, "Endless", tag + 1, &[KIB], None, nothing())
        .await
        .unwrap();
    beside
        .wait_for("the second stream's window", |s| *s == Seen::Polled(WINDOW))
        .await;
    held_at(
        &mut ch,
        &mut beside,
        tag + 2,
        WINDOW,
        "a reader beside another",
    )
    .await;
    went(true, &stats);
    drop((first, second));
    for w in [&mut lone, &mut beside] {
        w.wait_for("the producer dropped with its stream", |s| {
            *s == Seen::ProducerDropped
        })
        .await;
    }
}

/// Stream messages of 16 KiB (inline, each alone in its frames) after a first of
/// 64 KiB (by reference).
fn mixed(id: u64) -> Echo {
    let kib = if id == 0 { KIB } else { 16 };
    Echo {
        id,
        data: vec![7; kib as usize * 1024],
    }
}

/// How many [`mixed`] messages a window of the default 1 MiB begins: a message
/// begins while credit is left (each is charged its length plus 32 B).
fn mixed_begun() -> u64 {
    let (mut credit, mut begun) = (1i64 << 20, 0);
    while credit > 0 {
        credit -= prost::Message::encoded_len(&mixed(begun)) as i64 + 32;
        begun += 1;
    }
    begun
}

/// Only right after a message by reference is the next one asked for ahead of
/// credit: a client stream of [`mixed`] messages to a handler that reads nothing
/// has exactly what the window begins asked of its producer, and no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_inline_message_the_client_producer_waits_for_credit_again() {
    let (mut ch, stats, _stop) = channel(true).await;
    let tag = 741;
    let mut w = Witness::new(tag);
    let begun = mixed_begun();
    let (tx, source) = ChanSource::new(tag, 1);
    let feed = tokio::spawn(async move {
        for id in 0.. {
            if tx.send(Ok(mixed(id))).await.is_err() {
                break;
            }
        }
    });
    let mut ch2 = ch.clone();
    let blocked =
        tokio::spawn(async move { open(&mut ch2, "Block", tag, &[], None, source.boxed()).await });
    w.wait_for("the window's worth sent", |s| *s == Seen::Polled(begun))
        .await;
    held_at(&mut ch, &mut w, tag + 1, begun, "a handler").await;
    went(true, &stats);
    blocked.abort();
    feed.abort();
}

/// The server's writer likewise: a server stream of [`mixed`] messages to a reader
/// that takes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_inline_message_the_server_producer_waits_for_credit_again() {
    let (mut ch, stats, _stop) = channel(true).await;
    let tag = 743;
    let mut w = Witness::new(tag);
    let begun = mixed_begun();
    let nothing = CountSource::boxed(0, 0, 0, None);
    let unread = open(&mut ch, "Endless", tag, &[16, KIB], None, nothing)
        .await
        .unwrap();
    w.wait_for("the window's worth produced", |s| *s == Seen::Polled(begun))
        .await;
    held_at(&mut ch, &mut w, tag + 1, begun, "a reader").await;
    went(true, &stats);
    drop(unread);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_handler_that_reads_nothing_holds_the_client_producer_to_a_window() {
    handler_reading_nothing(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_handler_that_reads_nothing_holds_the_client_producer_to_a_window_in_chunks() {
    handler_reading_nothing(false).await;
}

async fn handler_reading_nothing(by_ref: bool) {
    let (mut ch, stats, _stop) = channel(by_ref).await;
    reading_nothing_on(&mut ch, 703 + tags(by_ref), asked(by_ref, WINDOW)).await;
    went(by_ref, &stats);
}

/// A client stream to "Block" (tag `tag`, another stream `tag + 1`), whose handler
/// never reads: `window` messages (see [`asked`]) produced, and no more.
async fn reading_nothing_on(ch: &mut Channel, tag: u64, window: u64) {
    let mut w = Witness::new(tag);
    // `Block` never reads its inbound: the client's writer stops at the window.
    let mut ch2 = ch.clone();
    let blocked = tokio::spawn(async move {
        let source = CountSource::boxed(tag, u64::MAX, (KIB * 1024) as usize, None);
        open(&mut ch2, "Block", tag, &[], None, source).await
    });
    w.wait_for("a window's worth sent", |s| *s == Seen::Polled(window))
        .await;
    held_at(ch, &mut w, tag + 1, window, "a handler").await;
    blocked.abort();
}
