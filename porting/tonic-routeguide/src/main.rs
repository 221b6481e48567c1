//! A tonic route guide, server and client in one program: a method of each call
//! shape (unary, server streaming, client streaming, bidirectional), the server on
//! 127.0.0.1 port 0, the client's answers printed, exit 0.
//!
//! Written against `tonic::` paths in the shape of tonic's routeguide example
//! (`tokio_stream` and `async_stream` for the streams, `tonic::Streaming` for what
//! arrives); what differs for rdma-rpc and for a test run:
//! * the address scheme: `rdma://` where tonic says `http://`;
//! * server and client are one program, the server on an already bound listener
//!   (port 0, so the port is known before the client connects):
//!   `serve_with_listener`, where tonic would say
//!   `serve_with_incoming_shutdown(TcpListenerStream::new(listener), signal)`;
//! * so that a run prints the same every time, the server does not print per call
//!   (in one process its lines would interleave with the client's), the route is a
//!   fixed list of points rather than random ones, and the chat is a fixed list of
//!   notes rather than one a second without end.
//!
//! `Point` is a `HashMap` key with no `impl Eq`/`#[derive(Hash)]` of its own: prost
//! 0.14 derives both for messages whose fields allow it, on tonic as here.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_stream::{wrappers::ReceiverStream, Stream, StreamExt};
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

use routeguide::route_guide_client::RouteGuideClient;
use routeguide::route_guide_server::{RouteGuide, RouteGuideServer};
use routeguide::{Feature, Point, Rectangle, RouteNote, RouteSummary};

pub mod routeguide {
    tonic::include_proto!("routeguide");
}

mod data;

#[derive(Debug)]
pub struct RouteGuideService {
    features: Arc<Vec<Feature>>,
}

#[tonic::async_trait]
impl RouteGuide for RouteGuideService {
    async fn get_feature(&self, request: Request<Point>) -> Result<Response<Feature>, Status> {
        for feature in &self.features[..] {
            if feature.location.as_ref() == Some(request.get_ref()) {
                return Ok(Response::new(feature.clone()));
            }
        }

        Ok(Response::new(Feature::default()))
    }

    type ListFeaturesStream = ReceiverStream<Result<Feature, Status>>;

    async fn list_features(
        &self,
        request: Request<Rectangle>,
    ) -> Result<Response<Self::ListFeaturesStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let features = self.features.clone();

        tokio::spawn(async move {
            for feature in &features[..] {
                if in_range(feature.location.as_ref().unwrap(), request.get_ref()) {
                    tx.send(Ok(feature.clone())).await.unwrap();
                }
            }
        });

        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn record_route(
        &self,
        request: Request<tonic::Streaming<Point>>,
    ) -> Result<Response<RouteSummary>, Status> {
        let mut stream = request.into_inner();

        let mut summary = RouteSummary::default();
        let mut last_point = None;
        let now = Instant::now();

        while let Some(point) = stream.next().await {
            let point = point?;
            summary.point_count += 1;

            for feature in &self.features[..] {
                if feature.location.as_ref() == Some(&point) {
                    summary.feature_count += 1;
                }
            }

            if let Some(ref last_point) = last_point {
                summary.distance += calc_distance(last_point, &point);
            }

            last_point = Some(point);
        }

        summary.elapsed_time = now.elapsed().as_secs() as i32;

        Ok(Response::new(summary))
    }

    type RouteChatStream = Pin<Box<dyn Stream<Item = Result<RouteNote, Status>> + Send + 'static>>;

    async fn route_chat(
        &self,
        request: Request<tonic::Streaming<RouteNote>>,
    ) -> Result<Response<Self::RouteChatStream>, Status> {
        let mut notes = HashMap::new();
        let mut stream = request.into_inner();

        let output = async_stream::try_stream! {
            while let Some(note) = stream.next().await {
                let note = note?;

                let location = note.location.unwrap();

                let location_notes = notes.entry(location).or_insert(vec![]);
                location_notes.push(note);

                for note in location_notes {
                    yield note.clone();
                }
            }
        };

        Ok(Response::new(Box::pin(output) as Self::RouteChatStream))
    }
}

fn in_range(point: &Point, rect: &Rectangle) -> bool {
    let lo = rect.lo.as_ref().unwrap();
    let hi = rect.hi.as_ref().unwrap();

    let left = lo.longitude.min(hi.longitude);
    let right = lo.longitude.max(hi.longitude);
    let top = lo.latitude.max(hi.latitude);
    let bottom = lo.latitude.min(hi.latitude);

    point.longitude >= left
        && point.longitude <= right
        && point.latitude >= bottom
        && point.latitude <= top
}

/// Great-circle distance in metres (haversine).
fn calc_distance(p1: &Point, p2: &Point) -> i32 {
    const CORD_FACTOR: f64 = 1e7;
    const R: f64 = 6_371_000.0;

    let lat1 = (p1.latitude as f64 / CORD_FACTOR).to_radians();
    let lat2 = (p2.latitude as f64 / CORD_FACTOR).to_radians();
    let delta_lat = lat2 - lat1;
    let delta_lng = ((p2.longitude - p1.longitude) as f64 / CORD_FACTOR).to_radians();

    let a =
        (delta_lat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (delta_lng / 2.0).sin().powi(2);
    let c = 2.0 * a.sqrt().atan2((1.0 - a).sqrt());

    (R * c) as i32
}

async fn print_features(
    client: &mut RouteGuideClient<Channel>,
) -> Result<(), Box<dyn std::error::Error>> {
    let rectangle = Rectangle {
        lo: Some(Point {
            latitude: 400_000_000,
            longitude: -750_000_000,
        }),
        hi: Some(Point {
            latitude: 420_000_000,
            longitude: -730_000_000,
        }),
    };

    let mut stream = client
        .list_features(Request::new(rectangle))
        .await?
        .into_inner();

    while let Some(feature) = stream.message().await? {
        println!("FEATURE = {feature:?}");
    }

    Ok(())
}

async fn run_record_route(
    client: &mut RouteGuideClient<Channel>,
) -> Result<(), Box<dyn std::error::Error>> {
    let points = vec![
        Point {
            latitude: 407_838_351,
            longitude: -746_143_763,
        },
        Point {
            latitude: 408_122_808,
            longitude: -743_999_179,
        },
        Point {
            latitude: 410_000_000,
            longitude: -745_000_000,
        },
        Point {
            latitude: 413_628_156,
            longitude: -749_015_468,
        },
    ];

    println!("Traversing {} points", points.len());
    let request = Request::new(tokio_stream::iter(points));

    match client.record_route(request).await {
        Ok(response) => println!("SUMMARY: {:?}", response.into_inner()),
        Err(e) => println!("something went wrong: {e:?}"),
    }

    Ok(())
}

async fn run_route_chat(
    client: &mut RouteGuideClient<Channel>,
) -> Result<(), Box<dyn std::error::Error>> {
    let outbound = async_stream::stream! {
        for i in 0..4 {
            let note = RouteNote {
                location: Some(Point {
                    latitude: 409_146_138 + i % 2,
                    longitude: -746_188_906,
                }),
                message: format!("note {i}"),
            };

            yield note;
        }
    };

    let response = client.route_chat(Request::new(outbound)).await?;
    let mut inbound = response.into_inner();

    while let Some(note) = inbound.message().await? {
        println!("NOTE = {note:?}");
    }

    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Server, as tonic's server example.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;

    println!("RouteGuideServer listening on: {}", addr);

    let route_guide = RouteGuideService {
        features: Arc::new(data::load()),
    };

    let svc = RouteGuideServer::new(route_guide);

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(Server::builder().add_service(svc).serve_with_listener(
        listener,
        async {
            let _ = stopped.await;
        },
    ));

    // Client, as tonic's client example.
    let mut client = RouteGuideClient::connect(format!("rdma://{}", addr)).await?;

    println!("*** SIMPLE RPC ***");
    let response = client
        .get_feature(Request::new(Point {
            latitude: 409_146_138,
            longitude: -746_188_906,
        }))
        .await?;
    println!("RESPONSE = {response:?}");

    println!("\n*** SERVER STREAMING ***");
    print_features(&mut client).await?;

    println!("\n*** CLIENT STREAMING ***");
    run_record_route(&mut client).await?;

    println!("\n*** BIDIRECTIONAL STREAMING ***");
    run_route_chat(&mut client).await?;

    let _ = stop.send(());
    server.await??;
    Ok(())
}
