//! Every tonic item that `docs/porting/items.txt` marks `same`, named by its tonic
//! path: this module compiles with rpc-core as `tonic` and rpc-health as
//! `tonic-health`, and `tests/tests/porting_guide.rs` checks that each `same` item's
//! text is here. Never run: type-checking it is the point.
#![allow(dead_code, unused_variables, unused_mut, unused_must_use, clippy::all)]

use std::time::Duration;

use tonic::server::NamedService;

use crate::parity::parity_client::ParityClient;
use crate::parity::parity_server::{self, ParityServer};
use crate::parity::HelloRequest;
use crate::MyParity;

fn interceptor(r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    Ok(r)
}

fn takes_interceptor(_: impl tonic::service::Interceptor) {}
fn takes_named<S: tonic::server::NamedService>() {}

#[tonic::async_trait]
trait Uses {
    async fn f(&self);
}

pub async fn same_items() -> Result<(), Box<dyn std::error::Error>> {
    // Request
    let mut r = tonic::Request::new(1u32);
    tonic::Request::get_ref(&r);
    tonic::Request::get_mut(&mut r);
    tonic::Request::metadata(&r);
    tonic::Request::metadata_mut(&mut r);
    tonic::Request::extensions(&r);
    tonic::Request::extensions_mut(&mut r);
    let r = tonic::Request::map(r, |m| m + 1);
    let (md, ext, m) = tonic::Request::into_parts(r);
    let r = tonic::Request::from_parts(md, ext, m);
    let _: u32 = tonic::Request::into_inner(r);
    let _: tonic::Request<u32> = tonic::IntoRequest::into_request(5u32);

    // Response
    let mut r = tonic::Response::new(1u32);
    tonic::Response::get_ref(&r);
    tonic::Response::get_mut(&mut r);
    tonic::Response::metadata(&r);
    tonic::Response::metadata_mut(&mut r);
    tonic::Response::extensions(&r);
    tonic::Response::extensions_mut(&mut r);
    let r = tonic::Response::map(r, |m| m + 1);
    let (md, m, ext) = tonic::Response::into_parts(r);
    let r = tonic::Response::from_parts(md, m, ext);
    let _: u32 = tonic::Response::into_inner(r);

    // Status and Code
    let mut s = tonic::Status::new(tonic::Code::Ok, "m");
    let s2 = tonic::Status::cancelled("c");
    tonic::Status::code(&s);
    tonic::Status::message(&s);
    tonic::Status::details(&s);
    tonic::Status::metadata(&s);
    tonic::Status::metadata_mut(&mut s);
    tonic::Status::with_details(tonic::Code::Internal, "m", b"d".to_vec().into());
    tonic::Status::with_metadata(
        tonic::Code::Internal,
        "m",
        tonic::metadata::MetadataMap::new(),
    );
    tonic::Status::with_details_and_metadata(
        tonic::Code::Internal,
        "m",
        b"d".to_vec().into(),
        tonic::metadata::MetadataMap::new(),
    );
    tonic::Status::from_error("boom".into());
    let _ = tonic::Status::try_from_error("boom".into());
    let mut ok = tonic::Status::ok("fine");
    tonic::Status::set_source(&mut ok, std::sync::Arc::new(std::fmt::Error));
    let _: tonic::Result<u32> = Ok(1);
    let fds: &[u8] = tonic::include_file_descriptor_set!("parity_descriptor");
    assert!(!fds.is_empty());
    let headers = tonic::metadata::MetadataMap::into_headers(tonic::metadata::MetadataMap::new());
    let _ = tonic::metadata::MetadataMap::from_headers(headers);
    let m = tonic::GrpcMethod::new("pkg.Svc", "Method");
    let _ = (m.service(), m.method());
    tonic::Code::description(&tonic::Code::NotFound);
    tonic::Code::from_bytes(b"5");
    let _: i32 = tonic::Code::from(5).into();
    let _ = tonic::Extensions::new();

    // Metadata
    let mut md = tonic::metadata::MetadataMap::new();
    let _ = tonic::metadata::MetadataMap::with_capacity(4);
    tonic::metadata::MetadataMap::insert(
        &mut md,
        "k",
        tonic::metadata::MetadataValue::from_static("v"),
    );
    tonic::metadata::MetadataMap::get(&md, "k");
    tonic::metadata::MetadataMap::get_all(&md, "k");
    tonic::metadata::MetadataMap::keys(&md);
    let v: tonic::metadata::AsciiMetadataValue = tonic::metadata::MetadataValue::from_static("a");
    tonic::metadata::MetadataValue::to_str(&v)?;
    let _ = v == "a" && v == v.clone();
    let _ = tonic::metadata::MetadataValue::from_bytes(b"bin");

    // Interceptors and services
    takes_interceptor(interceptor);
    let svc = ParityServer::new(MyParity::default());
    let svc = tonic::service::interceptor::InterceptedService::new(svc, interceptor);
    let _ = tonic::service::InterceptorLayer::new(interceptor);
    takes_named::<ParityServer<MyParity>>();
    let _: &str = ParityServer::<MyParity>::NAME;

    // Endpoint
    let e = tonic::transport::Endpoint::from_static("rdma://127.0.0.1:1");
    let e = tonic::transport::Endpoint::new(e)?;
    let e = tonic::transport::Endpoint::try_from("rdma://127.0.0.1:1")?;
    let e = tonic::transport::Endpoint::timeout(e, Duration::from_secs(1));
    let e = tonic::transport::Endpoint::connect_timeout(e, Duration::from_secs(1));
    tonic::transport::Endpoint::get_connect_timeout(&e);
    let e = tonic::transport::Endpoint::concurrency_limit(e, 8);
    let e = tonic::transport::Endpoint::rate_limit(e, 8, Duration::from_secs(1));
    let e = tonic::transport::Endpoint::keep_alive_timeout(e, Duration::from_secs(1));
    let e = tonic::transport::Endpoint::keep_alive_while_idle(e, true);
    let e = tonic::transport::Endpoint::local_address(e, None);
    let e = tonic::transport::Endpoint::tcp_nodelay(e, true);
    let e = tonic::transport::Endpoint::tcp_keepalive(e, Some(Duration::from_secs(60)));
    let e = tonic::transport::Endpoint::tcp_keepalive_interval(e, Some(Duration::from_secs(5)));
    let e = tonic::transport::Endpoint::tcp_keepalive_retries(e, Some(3));
    let e = tonic::transport::Endpoint::initial_stream_window_size(e, 1 << 20);
    let e = tonic::transport::Endpoint::initial_connection_window_size(e, None);
    let e = tonic::transport::Endpoint::http2_adaptive_window(e, true);
    let e = tonic::transport::Endpoint::max_frame_size(e, 1 << 16);
    let c: tonic::transport::Channel = tonic::transport::Endpoint::connect(&e).await?;
    let e = tonic::transport::Channel::from_static("rdma://127.0.0.1:1");
    let uri: tonic::transport::Uri = "rdma://127.0.0.1:1".parse()?;
    let from_uri = tonic::transport::Channel::builder(uri.clone());
    let _ = tonic::transport::Endpoint::uri(&from_uri);
    let _ = tonic::transport::Endpoint::from(uri);
    let b = tonic::transport::Channel::balance_list(vec![e.clone()].into_iter());
    let (b, tx) = tonic::transport::Channel::balance_channel::<u32>(4);
    tx.send(tonic::transport::channel::Change::Insert(1, e))
        .await?;
    let _: Option<tonic::transport::Error> = None;

    // Server
    let (reporter, health) = tonic_health::server::health_reporter();
    let server = tonic::transport::Server::builder();
    let server = tonic::transport::Server::layer(server, tower::layer::util::Identity::new());
    let server = tonic::transport::Server::concurrency_limit_per_connection(server, 8);
    let server = tonic::transport::Server::tcp_nodelay(server, true);
    let server = tonic::transport::Server::tcp_keepalive(server, Some(Duration::from_secs(60)));
    let server = tonic::transport::Server::tcp_keepalive_interval(server, None);
    let server = tonic::transport::Server::tcp_keepalive_retries(server, None);
    let server = tonic::transport::Server::max_concurrent_streams(server, 128);
    let server = tonic::transport::Server::initial_stream_window_size(server, 1 << 20);
    let server = tonic::transport::Server::initial_connection_window_size(server, None);
    let server = tonic::transport::Server::http2_adaptive_window(server, Some(true));
    let server = tonic::transport::Server::max_frame_size(server, 1 << 16);
    let server = tonic::transport::Server::accept_http1(server, true);
    let server = tonic::transport::Server::load_shed(server, false);
    let server = tonic::transport::Server::max_connection_age(server, Duration::from_secs(60));
    let server = tonic::transport::Server::max_connection_age_grace(server, Duration::from_secs(5));
    let server = tonic::transport::Server::trace_fn(server, |_| unimplemented!());
    let mut routes = tonic::service::Routes::builder();
    routes.add_service(ParityServer::new(MyParity::default()));
    let routes = tonic::service::Routes::prepare(routes.routes());
    let mut server = server;
    let _ = tonic::transport::Server::add_routes(&mut server, routes);
    let router = tonic::transport::Server::add_service(server, svc);
    let router = tonic::transport::Server::add_optional_service(
        tonic::transport::Server::builder(),
        Some(health),
    );
    let router2 =
        tonic::transport::Server::builder().add_service(ParityServer::new(MyParity::default()));
    let r1 = tonic::transport::server::Router::serve(router2, "127.0.0.1:1".parse()?);
    let r2 = tonic::transport::server::Router::serve_with_shutdown(
        router,
        "127.0.0.1:1".parse()?,
        async {},
    );
    let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:1".parse()?)?
        .with_nodelay(Some(true))
        .with_keepalive(None)
        .with_keepalive_interval(None)
        .with_keepalive_retries(None);
    let _ = tonic::transport::server::TcpIncoming::local_addr(&incoming);

    // Generated code
    let mut client = ParityClient::new(c.clone());
    let client = ParityClient::connect("rdma://127.0.0.1:1").await?;
    let client = ParityClient::with_interceptor(c, interceptor);
    let mut client = ParityClient::max_encoding_message_size(client, 1);
    ParityClient::hello(&mut client, HelloRequest::default()).await?;
    fn uses_trait<T: parity_server::Parity>() {}
    let s = ParityServer::with_interceptor(MyParity::default(), interceptor);
    let s = ParityServer::from_arc(std::sync::Arc::new(MyParity::default()));
    let s = ParityServer::max_encoding_message_size(s, 1);

    // tonic-health
    tonic_health::server::HealthReporter::set_serving::<ParityServer<MyParity>>(&reporter).await;
    tonic_health::server::HealthReporter::set_not_serving::<ParityServer<MyParity>>(&reporter)
        .await;
    tonic_health::server::HealthReporter::set_service_status(
        &reporter,
        "x",
        tonic_health::ServingStatus::Serving,
    )
    .await;
    tonic_health::server::HealthReporter::clear_service_status(&mut reporter.clone(), "x").await;
    let _ = tonic_health::server::HealthService::from_health_reporter(reporter);
    let _ = tonic_health::pb::health_client::HealthClient::connect("rdma://127.0.0.1:1").await;
    let _ = tonic_health::pb::HealthCheckRequest::default();
    let _: &[u8] = tonic_health::pb::FILE_DESCRIPTOR_SET;
    let mut health =
        tonic_health::pb::health_client::HealthClient::connect("rdma://127.0.0.1:1").await?;
    let request = tonic_health::pb::HealthCheckRequest::default();
    tonic_health::pb::health_client::HealthClient::watch(&mut health, request).await?;
    fn uses_health<T: tonic_health::pb::health_server::Health>() {}
    let _: Option<tonic_health::server::WatchStream> = None;
    Ok(())
}

/// Streaming, beside what `porting/tonic-routeguide` compiles of generated code.
async fn streaming(mut s: tonic::Streaming<HelloRequest>) -> Result<(), tonic::Status> {
    tonic::Streaming::message(&mut s).await?;
    let mut s: tonic::codec::Streaming<HelloRequest> = s;
    tonic::codec::Streaming::trailers(&mut s).await?;
    Ok(())
}

fn streaming_request<S>(s: S) -> tonic::Request<S::Stream>
where
    S: tonic::IntoStreamingRequest<Message = HelloRequest>,
{
    tonic::IntoStreamingRequest::into_streaming_request(s)
}
