//! Small stream messages, end to end: a producer that always has the next one
//! ready is coalesced into batch frames (hundreds of messages per `MSG`), and what
//! a user relies on still holds: every message arrives whole and in order, both
//! ways; an error after them arrives after every message before it; a reader
//! that reads nothing holds its producer to the window (counted in bytes, so
//! tens of thousands of tiny messages), while another stream of the connection
//! keeps moving. The typed API (`Streaming<T>`) decodes each message in place
//! from its batch: the same messages, in order, each still held to the decoding
//! limit.

use examples::route_guide::RouteGuideService;
use examples::routeguide::route_guide_client::RouteGuideClient;
use examples::routeguide::route_guide_server::RouteGuideServer;
use examples::routeguide::{Feature, Point, Rectangle};
use rpc_core::transport::{Channel, Server};
use rpc_core::Code;
use tests::raw_stream::{next, open, read_all, CountSource, Seen, StreamService, Witness};

/// The engine's window (`STREAM_WINDOW`) and per-message charge beside its bytes
/// (`MESSAGE_CHARGE`): a producer begins a message only while credit is left.
const WINDOW_BYTES: u64 = 1 << 20;
const MESSAGE_CHARGE: u64 = 32;
/// Bytes of data in each small message.
const LEN: u64 = 8;

/// An `Echo { id, data: [_; 8] }` encodes to 10 bytes for id 0 and at most 14 for
/// ids below 2^21: the window lets at least this many begin ahead of a reader...
const AT_LEAST: u64 = WINDOW_BYTES / (MESSAGE_CHARGE + LEN + 6);
/// ...and at most this many (one beyond the credit, one more pulled from the
/// producer and held for the next frame).
const AT_MOST: u64 = WINDOW_BYTES.div_ceil(MESSAGE_CHARGE + LEN + 2) + 2;

async fn channel() -> (Channel, tokio::sync::oneshot::Sender<()>) {
    let (addr, stop) = tests::serve_router(Server::builder().add_service(StreamService)).await;
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    (ch, stop)
}

fn nothing() -> rpc_core::stream::BoxMessageSource {
    CountSource::boxed(0, 0, 0, None)
}

/// The ids and data `CountSource` produces for `n` messages of `LEN` bytes.
fn assert_counted(msgs: &[tests::Echo], n: u64) {
    assert_eq!(msgs.len() as u64, n, "every message arrived");
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(m.id, i as u64, "in order");
        assert_eq!(m.data, vec![(i % 251) as u8; LEN as usize], "whole");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_small_server_messages_arrive_whole_and_in_order() {
    let (mut ch, _stop) = channel().await;
    let n = 50_000;
    let r = open(&mut ch, "Count", 901, &[n, LEN, 0], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_counted(&msgs, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_small_client_messages_reach_the_handler_whole() {
    let (mut ch, _stop) = channel().await;
    let n = 50_000;
    let mut w = Witness::new(902);
    let source = CountSource::boxed(902, n, LEN as usize, None);
    let r = open(&mut ch, "Sum", 902, &[], None, source).await.unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    end.unwrap();
    assert_eq!(msgs.len(), 1, "one answer");
    assert_eq!(msgs[0].id, n, "the handler read every message");
    assert_eq!(msgs[0].data, (n * LEN).to_be_bytes(), "each of its length");
    w.wait_for("the handler's inbound ended OK", |s| {
        *s == Seen::InboundEnded(Ok(n))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_batched_messages_arrives_after_every_one_of_them() {
    let (mut ch, _stop) = channel().await;
    let n = 20_000;
    let r = open(&mut ch, "Count", 903, &[n, LEN, 1], None, nothing())
        .await
        .unwrap();
    let mut inbound = r.messages;
    let (msgs, end) = read_all(&mut inbound).await;
    assert_counted(&msgs, n);
    let s = end.unwrap_err();
    assert_eq!(s.code(), Code::Aborted);
    assert_eq!(s.message(), format!("failed after {n}"));
    assert!(
        next(&mut inbound).await.is_none(),
        "nothing after the error"
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_of_small_messages_holds_its_batching_producer_to_the_window() {
    let (mut ch, _stop) = channel().await;
    let mut w = Witness::new(904);
    let endless = u64::MAX / 2;
    let r = open(&mut ch, "Count", 904, &[endless, LEN, 0], None, nothing())
        .await
        .unwrap();
    let mut slow = r.messages;
    w.wait_for(
        "a window's worth produced",
        |s| matches!(s, Seen::Polled(n) if *n >= AT_LEAST),
    )
    .await;
    // Another stream of the connection moves completely while this one is not
    // read at all: this producer stays within the window meanwhile.
    let r = open(
        &mut ch,
        "Count",
        905,
        &[3 * AT_MOST, LEN, 0],
        None,
        nothing(),
    )
    .await
    .unwrap();
    let mut other = r.messages;
    let (msgs, end) = read_all(&mut other).await;
    end.unwrap();
    assert_counted(&msgs, 3 * AT_MOST);
    let ahead = most_polled(&w.drain());
    assert!(
        (AT_LEAST..=AT_MOST).contains(&ahead),
        "{ahead} produced for a reader that took none (window: {AT_LEAST}..={AT_MOST})"
    );
    // Read one at a time for two windows: never more than a window ahead.
    let mut produced = ahead;
    for read in 1..=2 * AT_MOST {
        let m = next(&mut slow).await.unwrap().unwrap();
        assert_eq!(m.id, read - 1, "in order");
        produced = produced.max(most_polled(&w.drain()));
        assert!(
            produced <= read + AT_MOST,
            "{produced} produced when the reader had taken {read}"
        );
    }
    drop(slow);
    w.wait_for("the producer dropped with the stream", |s| {
        *s == Seen::ProducerDropped
    })
    .await;
}

/// A route guide of `n` features along the equator, named by their index, and a
/// typed client of it (and the server's stop); the feature at `long_at` has a
/// name of `long` bytes.
async fn guide(
    n: i32,
    long_at: i32,
    long: usize,
) -> (
    RouteGuideClient<Channel>,
    Rectangle,
    tokio::sync::oneshot::Sender<()>,
) {
    let features = (0..n)
        .map(|i| Feature {
            name: if i == long_at {
                "x".repeat(long)
            } else {
                i.to_string()
            },
            location: Some(Point {
                latitude: 0,
                longitude: i,
            }),
        })
        .collect();
    let server =
        Server::builder().add_service(RouteGuideServer::new(RouteGuideService::new(features)));
    let (addr, stop) = tests::serve_router(server).await;
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let all = Rectangle {
        lo: Some(Point {
            latitude: 0,
            longitude: 0,
        }),
        hi: Some(Point {
            latitude: 0,
            longitude: n,
        }),
    };
    (RouteGuideClient::new(ch), all, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_stream_of_small_messages_decodes_each_in_order_from_its_batch() {
    let n = 30_000;
    let (mut client, all, _stop) = guide(n, -1, 0).await;
    let mut features = client.list_features(all).await.unwrap().into_inner();
    let mut i = 0;
    while let Some(f) = features.message().await.unwrap() {
        assert_eq!(f.name, i.to_string(), "in order, whole");
        assert_eq!(f.location.unwrap().longitude, i);
        i += 1;
    }
    assert_eq!(i, n, "every message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_decoding_limit_mid_batch_ends_the_stream_after_those_before_it() {
    let (n, long_at) = (5_000, 2_500);
    let (client, all, _stop) = guide(n, long_at, 200).await;
    let mut client = client.max_decoding_message_size(100);
    let mut features = client.list_features(all).await.unwrap().into_inner();
    for i in 0..long_at {
        let f = features.message().await.unwrap().expect("a message");
        assert_eq!(f.name, i.to_string());
    }
    let refused = features.message().await.unwrap_err();
    assert_eq!(refused.code(), Code::OutOfRange, "{refused:?}");
    assert_eq!(features.message().await.unwrap(), None, "nothing after it");
}
