//! The four call shapes end to end: a generated route-guide client calling a
//! generated server over the in-process loopback, whose half-streams are bounded
//! queues pulled as the reader reads (as the RC transport's credits are).

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use codegen_tests::loopback::{Loopback, QUEUE_BOUND};
use codegen_tests::routeguide::route_guide_client::RouteGuideClient;
use codegen_tests::routeguide::route_guide_server::{RouteGuide, RouteGuideServer};
use codegen_tests::routeguide::{Feature, Point, Rectangle, RouteNote, RouteSummary};
use futures_util::stream::{self, Stream, StreamExt};
use rpc_core::metadata::AsciiMetadataValue;
use rpc_core::server::{BoxFuture, ReplyBody, ServerCall, ServerReply};
use rpc_core::{Code, MetadataMap, Request, Response, Status, Streaming};
use tokio::sync::{mpsc, oneshot};

type FeatureStream = Pin<Box<dyn Stream<Item = Result<Feature, Status>> + Send>>;
type NoteStream = Pin<Box<dyn Stream<Item = Result<RouteNote, Status>> + Send>>;

/// How `list_features` answers.
#[derive(Default)]
enum Listing {
    /// The features in the rectangle, then OK.
    #[default]
    InRange,
    /// The features in the rectangle, then this status.
    FailAfter(Status),
    /// Features without end, counting how many were made; says when its stream is
    /// dropped.
    Endless {
        made: Arc<AtomicUsize>,
        dropped: Mutex<Option<oneshot::Sender<()>>>,
    },
    /// One small feature, then one with a name of this many bytes.
    Big(usize),
}

#[derive(Default)]
struct Guide {
    features: Vec<Feature>,
    listing: Listing,
}

fn point(latitude: i32, longitude: i32) -> Point {
    Point {
        latitude,
        longitude,
    }
}

fn feature(name: &str, latitude: i32, longitude: i32) -> Feature {
    Feature {
        name: name.into(),
        location: Some(point(latitude, longitude)),
    }
}

fn guide() -> Guide {
    Guide {
        features: vec![
            feature("a", 1, 1),
            feature("b", 2, 2),
            feature("far", 50, 50),
            feature("c", 3, 3),
        ],
        listing: Listing::InRange,
    }
}

fn in_range(p: &Point, r: &Rectangle) -> bool {
    let (lo, hi) = (r.lo.unwrap_or_default(), r.hi.unwrap_or_default());
    (lo.latitude..=hi.latitude).contains(&p.latitude)
        && (lo.longitude..=hi.longitude).contains(&p.longitude)
}

/// Drops its sender when dropped: the handler's stream went away.
struct OnDrop(Option<oneshot::Sender<()>>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

#[rpc_core::async_trait]
impl RouteGuide for Guide {
    async fn get_feature(&self, request: Request<Point>) -> Result<Response<Feature>, Status> {
        let p = request.into_inner();
        let found = self.features.iter().find(|f| f.location == Some(p));
        Ok(Response::new(found.cloned().unwrap_or_default()))
    }

    type ListFeaturesStream = FeatureStream;

    async fn list_features(
        &self,
        request: Request<Rectangle>,
    ) -> Result<Response<FeatureStream>, Status> {
        let rect = request.into_inner();
        let found: Vec<Result<Feature, Status>> = self
            .features
            .iter()
            .filter(|f| in_range(&f.location.unwrap_or_default(), &rect))
            .cloned()
            .map(Ok)
            .collect();
        let stream: FeatureStream = match &self.listing {
            Listing::InRange => Box::pin(stream::iter(found)),
            Listing::FailAfter(status) => {
                Box::pin(stream::iter(found).chain(stream::iter([Err(status.clone())])))
            }
            Listing::Endless { made, dropped } => {
                let made = Arc::clone(made);
                let guard = OnDrop(dropped.lock().unwrap().take());
                Box::pin(stream::iter(0..).map(move |n| {
                    let _alive = &guard;
                    made.fetch_add(1, Ordering::SeqCst);
                    Ok(feature(&format!("#{n}"), 0, 0))
                }))
            }
            Listing::Big(len) => Box::pin(stream::iter([
                Ok(feature("small", 0, 0)),
                Ok(feature(&"x".repeat(*len), 0, 0)),
            ])),
        };
        Ok(Response::new(stream))
    }

    async fn record_route(
        &self,
        request: Request<Streaming<Point>>,
    ) -> Result<Response<RouteSummary>, Status> {
        let traveller = request
            .metadata()
            .get("x-traveller")
            .map(|v| v.to_str().unwrap().len() as i32)
            .unwrap_or(0);
        let mut points = request.into_inner();
        let mut summary = RouteSummary {
            elapsed_time: traveller,
            ..RouteSummary::default()
        };
        let mut last: Option<Point> = None;
        while let Some(p) = points.message().await? {
            summary.point_count += 1;
            if self.features.iter().any(|f| f.location == Some(p)) {
                summary.feature_count += 1;
            }
            if let Some(l) = last {
                summary.distance +=
                    (p.latitude - l.latitude).abs() + (p.longitude - l.longitude).abs();
            }
            last = Some(p);
        }
        Ok(Response::new(summary))
    }

    type RouteChatStream = NoteStream;

    /// Answers each note with the note and how many notes came before it.
    async fn route_chat(
        &self,
        request: Request<Streaming<RouteNote>>,
    ) -> Result<Response<NoteStream>, Status> {
        let notes = request.into_inner();
        let replies = notes.enumerate().map(|(i, note)| {
            note.map(|n| RouteNote {
                location: n.location,
                message: format!("{} after {i}", n.message),
            })
        });
        Ok(Response::new(Box::pin(replies)))
    }
}

fn client(
    guide: Guide,
) -> (
    RouteGuideClient<Loopback<RouteGuideServer<Guide>>>,
    Loopback<RouteGuideServer<Guide>>,
) {
    let transport = Loopback::new(RouteGuideServer::new(guide));
    (RouteGuideClient::new(transport.clone()), transport)
}

fn rect(lo: (i32, i32), hi: (i32, i32)) -> Rectangle {
    Rectangle {
        lo: Some(point(lo.0, lo.1)),
        hi: Some(point(hi.0, hi.1)),
    }
}

async fn names(stream: &mut Streaming<Feature>) -> Result<Vec<String>, Status> {
    let mut names = Vec::new();
    while let Some(f) = stream.message().await? {
        names.push(f.name);
    }
    Ok(names)
}

#[tokio::test]
async fn unary_still_works_beside_the_streaming_methods() {
    let (mut client, _) = client(guide());
    let reply = client.get_feature(point(2, 2)).await.unwrap();
    assert_eq!(reply.into_inner().name, "b");
}

#[tokio::test]
async fn a_server_stream_gives_every_message_in_order_then_none() {
    let (mut client, transport) = client(guide());
    let mut stream = client
        .list_features(rect((0, 0), (10, 10)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(names(&mut stream).await.unwrap(), ["a", "b", "c"]);
    assert_eq!(stream.message().await.unwrap(), None, "still ended");
    assert_eq!(transport.paths(), ["/routeguide.RouteGuide/ListFeatures"]);
}

#[tokio::test]
async fn a_server_stream_is_also_a_stream_of_results() {
    let (mut client, _) = client(guide());
    let stream = client
        .list_features(rect((0, 0), (2, 2)))
        .await
        .unwrap()
        .into_inner();
    let all: Vec<Result<Feature, Status>> = stream.collect().await;
    let names: Vec<String> = all.into_iter().map(|f| f.unwrap().name).collect();
    assert_eq!(names, ["a", "b"]);
}

#[tokio::test]
async fn an_error_item_mid_stream_gives_the_items_before_it_then_that_status() {
    let (mut client, _) = client(Guide {
        listing: Listing::FailAfter(Status::data_loss("map torn")),
        ..guide()
    });
    let mut stream = client
        .list_features(rect((0, 0), (2, 2)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().name, "a");
    assert_eq!(stream.message().await.unwrap().unwrap().name, "b");
    let err = stream.message().await.unwrap_err();
    assert_eq!((err.code(), err.message()), (Code::DataLoss, "map torn"));
    assert_eq!(
        stream.message().await.unwrap(),
        None,
        "nothing after the status"
    );
    let again = stream.trailers().await;
    assert!(matches!(again, Ok(None)), "{again:?}");
}

#[tokio::test]
async fn trailers_come_after_the_messages_and_drain_what_was_not_read() {
    let mut trailers = MetadataMap::new();
    trailers.insert("x-checked", AsciiMetadataValue::from_static("3"));
    let transport = Loopback::new(RouteGuideServer::new(guide())).with_trailers(trailers);
    let mut client = RouteGuideClient::new(transport);
    let mut stream = client
        .list_features(rect((0, 0), (10, 10)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().name, "a");
    let got = stream
        .trailers()
        .await
        .unwrap()
        .expect("an OK end has trailers");
    assert_eq!(got.get("x-checked").unwrap().to_str().unwrap(), "3");
    assert_eq!(stream.message().await.unwrap(), None, "drained");
}

#[tokio::test]
async fn each_received_message_is_held_to_the_decoding_limit() {
    let (client, _) = client(Guide {
        listing: Listing::Big(100),
        ..guide()
    });
    let mut client = client.max_decoding_message_size(50);
    let mut stream = client
        .list_features(rect((0, 0), (0, 0)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().name, "small");
    let err = stream.message().await.unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    assert!(err.message().contains("the limit is: 50 bytes"), "{err:?}");
}

#[tokio::test]
async fn a_client_stream_is_summed_up_by_one_reply_with_the_metadata() {
    let (mut client, transport) = client(guide());
    let points = [point(1, 1), point(9, 9), point(3, 3)];
    let mut request = Request::new(stream::iter(points));
    request
        .metadata_mut()
        .insert("x-traveller", AsciiMetadataValue::from_static("ada"));
    let summary = client.record_route(request).await.unwrap().into_inner();
    assert_eq!(
        summary,
        RouteSummary {
            point_count: 3,
            feature_count: 2,
            distance: 16 + 12,
            elapsed_time: 3,
        }
    );
    assert_eq!(transport.paths(), ["/routeguide.RouteGuide/RecordRoute"]);
}

#[tokio::test]
async fn a_client_stream_ends_when_its_sender_is_dropped() {
    let (mut client, _) = client(guide());
    let (tx, rx) = mpsc::channel(1);
    let points = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|p| (p, rx)) });
    let call = tokio::spawn(async move { client.record_route(points).await });
    tx.send(point(1, 1)).await.unwrap();
    tx.send(point(2, 2)).await.unwrap();
    drop(tx);
    let summary = call.await.unwrap().unwrap().into_inner();
    assert_eq!((summary.point_count, summary.feature_count), (2, 2));
}

#[tokio::test]
async fn the_client_streaming_reply_carries_the_trailers_in_its_metadata() {
    let mut trailers = MetadataMap::new();
    trailers.insert("x-route-id", AsciiMetadataValue::from_static("r7"));
    let transport = Loopback::new(RouteGuideServer::new(guide())).with_trailers(trailers);
    let mut client = RouteGuideClient::new(transport);
    let reply = client
        .record_route(stream::iter([point(1, 1)]))
        .await
        .unwrap();
    assert_eq!(
        reply
            .metadata()
            .get("x-route-id")
            .unwrap()
            .to_str()
            .unwrap(),
        "r7"
    );
}

#[tokio::test]
async fn each_streamed_request_is_held_to_the_server_s_decoding_limit() {
    let transport = Loopback::new(RouteGuideServer::new(guide()).max_decoding_message_size(30));
    let mut client = RouteGuideClient::new(transport);
    let notes = [note(1, "short"), note(2, &"long".repeat(20))];
    let mut replies = client
        .route_chat(stream::iter(notes))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        replies.message().await.unwrap().unwrap().message,
        "short after 0"
    );
    let err = replies.message().await.unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    assert!(err.message().contains("the limit is: 30 bytes"), "{err:?}");
}

#[tokio::test]
async fn a_request_over_the_client_s_encoding_limit_fails_the_call() {
    let (client, _) = client(guide());
    let mut client = client.max_encoding_message_size(30);
    let notes = [note(1, "short"), note(2, &"long".repeat(20))];
    let mut replies = client
        .route_chat(stream::iter(notes))
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    let err = loop {
        match replies.message().await {
            Ok(Some(n)) => got.push(n.message),
            Ok(None) => panic!("the call must fail, got {got:?}"),
            Err(status) => break status,
        }
    };
    // The reset may overtake the first reply; nothing after it arrives.
    assert!(
        got.len() <= 1 && got.iter().all(|m| m == "short after 0"),
        "{got:?}"
    );
    assert_eq!(err.code(), Code::Internal, "{err:?}");
    assert!(
        err.message().contains("encoded message length too large"),
        "{err:?}"
    );
}

fn note(latitude: i32, message: &str) -> RouteNote {
    RouteNote {
        location: Some(point(latitude, 0)),
        message: message.into(),
    }
}

#[tokio::test]
async fn bidi_ping_pong_reads_each_reply_before_sending_the_next_note() {
    let (mut client, transport) = client(guide());
    let (tx, rx) = mpsc::channel(1);
    let notes = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|n| (n, rx)) });
    // Resolves before any note is sent: the server's handler returned its Response.
    let mut replies = client.route_chat(notes).await.unwrap().into_inner();
    for i in 0..5 {
        tx.send(note(i, &format!("ping {i}"))).await.unwrap();
        let reply = replies.message().await.unwrap().expect("a reply per note");
        assert_eq!(reply.message, format!("ping {i} after {i}"));
        assert_eq!(reply.location, Some(point(i, 0)));
    }
    drop(tx);
    assert_eq!(
        replies.message().await.unwrap(),
        None,
        "ends with the notes"
    );
    assert_eq!(transport.paths(), ["/routeguide.RouteGuide/RouteChat"]);
}

#[tokio::test]
async fn a_reader_that_stops_reading_stops_its_producer_and_dropping_it_ends_the_producer() {
    let made = Arc::new(AtomicUsize::new(0));
    let (dropped_tx, dropped) = oneshot::channel();
    let (mut client, _) = client(Guide {
        listing: Listing::Endless {
            made: Arc::clone(&made),
            dropped: Mutex::new(Some(dropped_tx)),
        },
        ..guide()
    });
    let mut stream = client
        .list_features(rect((0, 0), (0, 0)))
        .await
        .unwrap()
        .into_inner();
    for read in 1..=20 {
        stream.message().await.unwrap().expect("endless");
        let ahead = made.load(Ordering::SeqCst);
        assert!(
            ahead <= read + QUEUE_BOUND,
            "{ahead} made for {read} read: more than the queue holds"
        );
    }
    drop(stream);
    dropped.await.expect("the handler's stream is dropped");
}

/// A server that answers any call with a stream of `replies` messages, whatever
/// the method's shape says.
#[derive(Clone)]
struct Replies(usize);

impl tower::Service<ServerCall> for Replies {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Status>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _call: ServerCall) -> Self::Future {
        let summaries = stream::iter(vec![Ok(RouteSummary::default()); self.0]);
        let source = Box::pin(rpc_core::codec::MessageStreamSource::new(summaries, None));
        Box::pin(async move { Ok(Response::new(ReplyBody::Stream(source))) })
    }
}

#[tokio::test]
async fn a_client_streaming_reply_of_no_message_or_two_is_internal() {
    for (count, says) in [(0, "missing response message"), (2, "more than one")] {
        let mut client = RouteGuideClient::new(Loopback::new(Replies(count)));
        let err = client
            .record_route(stream::iter([point(1, 1)]))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Internal, "{count}: {err:?}");
        assert!(err.message().contains(says), "{count}: {err:?}");
    }
    let mut client = RouteGuideClient::new(Loopback::new(Replies(1)));
    let one = client.record_route(stream::iter([point(1, 1)])).await;
    assert_eq!(one.unwrap().into_inner(), RouteSummary::default());
}

fn assert_send<T: Send>(_: &T) {}

#[test]
fn streaming_calls_and_their_streams_can_move_between_threads() {
    let (mut client, _) = client(guide());
    assert_send(&client.list_features(Rectangle::default()));
    assert_send(&client.record_route(stream::iter([point(0, 0)])));
    assert_send(&client.route_chat(stream::iter([note(0, "")])));
    let streaming: Option<Streaming<Feature>> = None;
    assert_send(&streaming);
}

/// The real transport satisfies the streaming methods' bounds (compiled, not run).
async fn _streaming_calls_compile_over_a_channel(
    mut client: RouteGuideClient<rpc_core::transport::Channel>,
) -> Result<(), Status> {
    client.list_features(Rectangle::default()).await?;
    client.record_route(stream::iter([point(0, 0)])).await?;
    client
        .route_chat(Request::new(stream::iter([note(0, "")])))
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_client_interceptor_sees_a_streaming_call_before_it_opens() {
    let transport = Loopback::new(RouteGuideServer::new(guide()));
    let mut client = RouteGuideClient::with_interceptor(transport.clone(), |mut r: Request<()>| {
        r.metadata_mut()
            .insert("x-traveller", AsciiMetadataValue::from_static("grace"));
        Ok(r)
    });
    let summary = client
        .record_route(stream::iter([point(1, 1)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        summary.elapsed_time, 5,
        "the handler saw the interceptor's metadata"
    );

    let mut refusing = RouteGuideClient::with_interceptor(transport.clone(), |_| {
        Err(Status::unauthenticated("no ticket"))
    });
    let err = refusing
        .route_chat(stream::iter([note(0, "hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert_eq!(
        transport.paths(),
        ["/routeguide.RouteGuide/RecordRoute"],
        "the refused call never reached the transport"
    );
}

#[tokio::test]
async fn each_streamed_reply_is_held_to_the_server_s_encoding_limit() {
    let server = RouteGuideServer::new(Guide {
        listing: Listing::Big(100),
        ..guide()
    })
    .max_encoding_message_size(50);
    let mut client = RouteGuideClient::new(Loopback::new(server));
    let mut stream = client
        .list_features(rect((0, 0), (0, 0)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().name, "small");
    let err = stream.message().await.unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    assert!(err.message().contains("the limit is: 50 bytes"), "{err:?}");
}

#[tokio::test]
async fn a_call_of_the_wrong_shape_is_refused_naming_the_method() {
    let mut grpc = rpc_core::client::Grpc::new(Loopback::new(RouteGuideServer::new(guide())));
    let streamed = grpc
        .streaming::<_, Point, Feature>(
            Request::new(stream::iter([point(1, 1)])),
            "/routeguide.RouteGuide/GetFeature",
        )
        .await
        .unwrap_err();
    assert_eq!(streamed.code(), Code::Internal);
    assert!(
        streamed
            .message()
            .contains("/routeguide.RouteGuide/GetFeature is a unary method"),
        "{streamed:?}"
    );
    let unary = grpc
        .unary::<Point, RouteSummary>(
            Request::new(point(1, 1)),
            "/routeguide.RouteGuide/RecordRoute",
        )
        .await
        .unwrap_err();
    assert_eq!(unary.code(), Code::Internal);
    assert!(
        unary
            .message()
            .contains("/routeguide.RouteGuide/RecordRoute is a streaming method"),
        "{unary:?}"
    );
}
