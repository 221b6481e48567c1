//! The route guide, all four call shapes in one run: a server on 127.0.0.1 (a port
//! the OS picks) and a client that asks for a feature (unary), lists the features
//! in a rectangle (server streaming), records a route (client streaming) and chats
//! notes at locations, reading each reply before sending the next note
//! (bidirectional). Exits 0 when every answer was as expected.

use examples::route_guide::RouteGuideService;
use examples::routeguide::route_guide_client::RouteGuideClient;
use examples::routeguide::route_guide_server::RouteGuideServer;
use examples::routeguide::{Point, Rectangle, RouteNote};
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;
use tokio::sync::mpsc;

fn point(latitude: i32, longitude: i32) -> Point {
    Point {
        latitude,
        longitude,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::init_tracing();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = format!("rdma://{}", listener.local_addr()?);
    println!("server: route guide on {addr}");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let reflection = rpc_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(examples::FILE_DESCRIPTOR_SET)
        .with_service_name("routeguide.RouteGuide")
        .build_v1()?;
    let serving = tokio::spawn(
        Server::builder()
            .add_service(reflection)
            .add_service(RouteGuideServer::new(RouteGuideService::sample()))
            .serve_with_listener(listener, async {
                let _ = stopped.await;
            }),
    );
    let mut client = RouteGuideClient::new(Channel::connect(addr).await?);

    println!("unary: GetFeature");
    let feature = client
        .get_feature(point(409_146_138, -746_188_906))
        .await?
        .into_inner();
    println!("  {feature:?}");

    println!("server streaming: ListFeatures");
    let rect = Rectangle {
        lo: Some(point(400_000_000, -750_000_000)),
        hi: Some(point(420_000_000, -730_000_000)),
    };
    let mut features = client.list_features(rect).await?.into_inner();
    let mut listed = 0;
    while let Some(f) = features.message().await? {
        println!("  {:?} at {:?}", f.name, f.location.unwrap_or_default());
        listed += 1;
    }
    if listed != 5 {
        return Err(format!("listed {listed} features, expected 5").into());
    }

    println!("client streaming: RecordRoute");
    let route = [
        point(407_838_351, -746_143_763),
        point(408_122_808, -743_999_179),
        point(413_628_156, -749_015_468),
        point(410_000_000, -745_000_000),
    ];
    let summary = client
        .record_route(Request::new(futures_util::stream::iter(route)))
        .await?
        .into_inner();
    println!("  {summary:?}");
    if (summary.point_count, summary.feature_count) != (4, 3) {
        return Err(format!("unexpected summary {summary:?}").into());
    }

    println!("bidirectional streaming: RouteChat");
    let (notes, outbox) = mpsc::channel::<RouteNote>(1);
    let outbound = futures_util::stream::unfold(outbox, |mut rx| async move {
        rx.recv().await.map(|note| (note, rx))
    });
    // Returns before any note is sent: the server answered with its stream.
    let mut replies = client.route_chat(outbound).await?.into_inner();
    let places = [point(1, 1), point(2, 2), point(1, 1), point(2, 2)];
    for (i, at) in places.into_iter().enumerate() {
        let note = RouteNote {
            location: Some(at),
            message: format!("note {i}"),
        };
        println!("  sent {:?} at {at:?}", note.message);
        notes.send(note).await?;
        // The server answers every note taken at this place so far: 1, 1, 2, 2.
        for _ in 0..=(i / 2) {
            let reply = replies.message().await?.ok_or("the chat ended early")?;
            println!("    got {:?}", reply.message);
        }
    }
    drop(notes);
    if replies.message().await?.is_some() {
        return Err("a reply after the last note's".into());
    }

    let _ = stop.send(());
    serving.await??;
    println!("done: all four shapes answered");
    Ok(())
}
