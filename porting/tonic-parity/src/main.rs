//! A tonic 0.14 client and server in one program, written against `tonic::` and
//! `tonic_health::` paths only, that uses every item of issue 13's Build 2-8 and
//! prints one transcript line per check. Ported to rdma-rpc by its Cargo.toml and
//! the address scheme (`SCHEME`) alone.
//!
//! Where rdma-rpc and tonic differ in what this prints, the line says so:
//! * an expired deadline (the channel's `timeout`, the server's `Server::timeout`)
//!   is `DeadlineExceeded` here, gRPC's code; tonic says `Cancelled`.
//! * a lazy channel whose dial failed waits out gRPC's connection backoff (100 ms
//!   first) before dialing again, where tonic dials on the next call: the first
//!   call after the server started is retried until it goes through.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus as WireStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use parity::parity_client::ParityClient;
use parity::parity_server::{Parity, ParityServer};
use parity::{HelloReply, HelloRequest, SlowRequest};

pub mod parity {
    tonic::include_proto!("parity");
}

mod same_items;

/// `http` on tonic.
const SCHEME: &str = "rdma";
/// Nothing listens there.
const NOWHERE: &str = "rdma://127.0.0.1:1";
const TOKEN: &str = "Bearer secret-token";

/// What the server's interceptor found, for the handler (a request extension).
#[derive(Clone)]
struct Caller(String);

/// Checks the bearer token and tells the handler who called.
fn check_token(mut request: Request<()>) -> Result<Request<()>, Status> {
    match request.metadata().get("authorization") {
        Some(t) if t == TOKEN => {
            request
                .extensions_mut()
                .insert(Caller("token-holder".into()));
            Ok(request)
        }
        Some(_) => Err(Status::unauthenticated("bad token")),
        None => Err(Status::unauthenticated("no token")),
    }
}

/// Adds the bearer token to every call.
fn add_token(mut request: Request<()>) -> Result<Request<()>, Status> {
    request
        .metadata_mut()
        .insert("authorization", MetadataValue::from_static(TOKEN));
    Ok(request)
}

#[derive(Default)]
struct MyParity {
    shutdown: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

#[tonic::async_trait]
impl Parity for MyParity {
    async fn hello(&self, request: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let caller = request
            .extensions()
            .get::<Caller>()
            .map_or("nobody".to_string(), |c| c.0.clone());
        let from = request
            .remote_addr()
            .map_or("unknown".to_string(), |a| a.ip().to_string());
        let req = request.into_inner();
        Ok(Response::new(HelloReply {
            message: format!("Hello {} ({caller}, from {from})", req.name),
            pad: vec![7; req.reply_pad as usize],
        }))
    }

    async fn fail(&self, _: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let mut metadata = MetadataMap::new();
        metadata.insert("x-reason", MetadataValue::from_static("empty-name"));
        Err(Status::with_details_and_metadata(
            Code::InvalidArgument,
            "name must not be empty",
            b"detail-bytes".to_vec().into(),
            metadata,
        ))
    }

    async fn slow(&self, request: Request<SlowRequest>) -> Result<Response<HelloReply>, Status> {
        tokio::time::sleep(Duration::from_millis(request.into_inner().millis)).await;
        Ok(Response::new(HelloReply::default()))
    }

    async fn shutdown(&self, _: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        if let Some(stop) = self.shutdown.lock().unwrap().take() {
            let _ = stop.send(());
        }
        Ok(Response::new(HelloReply {
            message: "stopping".into(),
            pad: vec![],
        }))
    }
}

/// A server layer: counts the calls that reach the server.
#[derive(Clone)]
struct CountLayer(Arc<AtomicUsize>);

impl<S> tower::Layer<S> for CountLayer {
    type Service = Count<S>;
    fn layer(&self, inner: S) -> Count<S> {
        Count(inner, self.0.clone())
    }
}

#[derive(Clone)]
struct Count<S>(S, Arc<AtomicUsize>);

impl<S: tower::Service<R>, R> tower::Service<R> for Count<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }
    fn call(&mut self, request: R) -> S::Future {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.call(request)
    }
}

fn code<T>(r: Result<T, Status>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(s) => format!("{:?}", s.code()),
    }
}

fn hello(name: &str) -> HelloRequest {
    HelloRequest {
        name: name.into(),
        ..Default::default()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let uri = format!("{SCHEME}://{addr}");

    // Endpoint::from_static, and a call where nothing listens.
    let mut nowhere = ParityClient::new(Endpoint::from_static(NOWHERE).connect_lazy());
    println!(
        "from_static, nothing there: {}",
        code(nowhere.hello(hello("x")).await)
    );

    // connect_lazy before the server is up: a channel timeout smaller than requests'.
    let channel: Channel = Endpoint::from_shared(uri.clone())?
        .timeout(Duration::from_millis(300))
        .connect_lazy();
    let mut client = ParityClient::with_interceptor(channel.clone(), add_token)
        .max_decoding_message_size(512)
        .max_encoding_message_size(4096);
    println!(
        "connect_lazy, no server yet: {}",
        code(client.hello(hello("early")).await)
    );

    // The server: a layer, a timeout, an intercepted service with size limits, health.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let counted = Arc::new(AtomicUsize::new(0));
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<ParityServer<MyParity>>().await;
    let service = ParityServer::new(MyParity {
        shutdown: Mutex::new(Some(stop)),
    })
    .max_decoding_message_size(1024)
    .max_encoding_message_size(1024);
    let service = tonic::service::interceptor::InterceptedService::new(service, check_token);
    let server = tokio::spawn(
        Server::builder()
            .timeout(Duration::from_millis(500))
            .layer(CountLayer(counted.clone()))
            .add_service(health)
            .add_service(service)
            .serve_with_shutdown(addr, async {
                let _ = stopped.await;
            }),
    );
    // Up once it accepts connections.
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The lazy channel connects now (after its backoff on rdma-rpc).
    let reply = loop {
        match client.hello(hello("Tonic")).await {
            Err(s) if s.code() == Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            other => break other?,
        }
    };
    println!("after the server started: {}", reply.into_inner().message);

    // The server's interceptor refuses a caller without the token.
    let mut anonymous = ParityClient::new(channel.clone());
    let err = anonymous.hello(hello("anon")).await.unwrap_err();
    println!("no token: {:?} {}", err.code(), err.message());

    // Details and metadata on an error.
    let err = client.fail(hello("")).await.unwrap_err();
    println!(
        "error: {:?} {:?} details={} x-reason={}",
        err.code(),
        err.message(),
        String::from_utf8_lossy(err.details()),
        err.metadata()
            .get("x-reason")
            .map_or("none", |v| v.to_str().unwrap_or("?"))
    );

    // Size limits: the server decodes at most 1024, the client at most 512; the
    // client encodes at most 4096, the server at most 1024.
    let big = HelloRequest {
        name: "big".into(),
        pad: vec![1; 2000],
        reply_pad: 0,
    };
    println!(
        "request over the server's decoding limit: {}",
        code(client.hello(big).await)
    );
    let reply_600 = HelloRequest {
        reply_pad: 600,
        ..hello("reply")
    };
    println!(
        "reply over the client's decoding limit: {}",
        code(client.hello(reply_600).await)
    );
    let huge = HelloRequest {
        pad: vec![1; 5000],
        ..hello("huge")
    };
    println!(
        "request over the client's encoding limit: {}",
        code(client.hello(huge).await)
    );
    let mut unlimited = ParityClient::with_interceptor(channel.clone(), add_token);
    let reply_2000 = HelloRequest {
        reply_pad: 2000,
        ..hello("reply")
    };
    println!(
        "reply over the server's encoding limit: {}",
        code(unlimited.hello(reply_2000).await)
    );

    // Deadlines: the channel's 300 ms is smaller than the request's 5 s.
    let mut request = Request::new(SlowRequest { millis: 2000 });
    request.set_timeout(Duration::from_secs(5));
    println!(
        "channel timeout 300 ms under a 5 s request (tonic: Cancelled): {}",
        code(client.slow(request).await)
    );
    // The server's 500 ms timeout caps a handler the client would wait 5 s for.
    let patient = Endpoint::from_shared(uri.clone())?.connect().await?;
    let mut patient = ParityClient::with_interceptor(patient, add_token);
    let mut request = Request::new(SlowRequest { millis: 2000 });
    request.set_timeout(Duration::from_secs(5));
    println!(
        "Server::timeout 500 ms under a 5 s request (tonic: Cancelled): {}",
        code(patient.slow(request).await)
    );

    // Health.
    let mut health = HealthClient::new(channel.clone());
    let check = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    let status = |r: Result<Response<tonic_health::pb::HealthCheckResponse>, Status>| match r {
        Ok(r) => format!("{:?}", WireStatus::try_from(r.into_inner().status).unwrap()),
        Err(s) => format!("{:?}", s.code()),
    };
    println!("health overall: {}", status(health.check(check("")).await));
    println!(
        "health parity.Parity: {}",
        status(health.check(check("parity.Parity")).await)
    );
    reporter.set_not_serving::<ParityServer<MyParity>>().await;
    println!(
        "health parity.Parity after set_not_serving: {}",
        status(health.check(check("parity.Parity")).await)
    );
    reporter
        .set_service_status("parity.Parity", tonic_health::ServingStatus::Serving)
        .await;
    println!(
        "health parity.Parity after set_service_status: {}",
        status(health.check(check("parity.Parity")).await)
    );
    println!(
        "health unknown.Service: {}",
        status(health.check(check("unknown.Service")).await)
    );

    // serve_with_shutdown, triggered from a call.
    let reply = client.shutdown(hello("bye")).await?;
    println!("shutdown call: {}", reply.into_inner().message);
    server.await??;
    println!(
        "server stopped; the layer counted {} calls",
        counted.load(Ordering::Relaxed)
    );
    Ok(())
}
