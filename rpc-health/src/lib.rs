//! gRPC health checking for rdma-rpc: the standard `grpc.health.v1.Health` service,
//! shaped like tonic-health 0.14. A program written against `tonic_health::` paths
//! builds against this crate when its Cargo.toml names it
//! `tonic-health = { package = "rpc-health", .. }`.
//!
//! # Serving
//!
//! [`server::health_reporter`] returns a [`server::HealthReporter`] and the
//! [`pb::health_server::HealthServer`] it updates. Add the server beside your own
//! services; set statuses through the reporter (or any clone of it) at any time,
//! and the next `Check` sees them. The server as a whole is the empty service name
//! `""`, `SERVING` from the start; any other service is unknown (`Check` ends
//! `NOT_FOUND`) until it is given a status.
//!
//! ```no_run
//! # use rpc_core::server::NamedService;
//! # struct GreeterServer;
//! # impl NamedService for GreeterServer { const NAME: &'static str = "helloworld.Greeter"; }
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use rpc_core::transport::Server;
//!
//! let (reporter, health) = rpc_health::server::health_reporter();
//! // Any service with a name: a generated `GreeterServer<MyGreeter>`, a tower stack...
//! reporter.set_serving::<GreeterServer>().await;
//! Server::builder()
//!     .add_service(health)
//!     // .add_service(GreeterServer::new(MyGreeter))
//!     .serve("127.0.0.1:50051".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Checking
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use rpc_health::pb::health_check_response::ServingStatus;
//! use rpc_health::pb::{health_client::HealthClient, HealthCheckRequest};
//!
//! let mut client = HealthClient::connect("rdma://127.0.0.1:50051").await?;
//! let request = HealthCheckRequest { service: "helloworld.Greeter".into() };
//! let reply = client.check(request).await?.into_inner();
//! assert_eq!(reply.status(), ServingStatus::Serving);
//! # Ok(()) }
//! ```
//!
//! # `Watch` arrives with streaming
//!
//! `Watch` is a server-streaming method, and rdma-rpc has no streaming calls yet.
//! Until it has, the server answers `Watch` with `UNIMPLEMENTED` (which the gRPC
//! health specification tells clients to read as "not offered, do not retry"), and
//! the Rust API has no `watch`: poll `Check` instead. Once streaming lands, `Watch`
//! arrives as tonic-health has it: `Health::watch`, `Health::WatchStream`,
//! `HealthClient::watch` and `server::WatchStream`.
//!
//! # Differences from tonic-health
//!
//! * No `Watch` (above). An implementation of tonic-health's `Health` trait of your
//!   own drops its `WatchStream` type and `watch` method.
//! * `HealthClient` and `HealthServer` have no interceptors, message size limits or
//!   compression settings, as rdma-rpc's generated clients and servers do not yet.
#![forbid(unsafe_code)]

pub mod pb;
pub mod server;
mod serving_status;

pub use serving_status::ServingStatus;
