//! Connections over RDMA: `Channel` (client), `Server`, `Endpoint`.
//!
//! PLACEHOLDER: the signatures are the contract generated code and users rely on;
//! the RDMA implementation is being written.

use std::fmt;
use std::future::Future;
use std::task::{Context, Poll};

use prost::Message;
use tower::Service;

use crate::client::{IncomingReply, OutgoingCall};
use crate::server::{BoxFuture, NamedService, ServerCall, ServerReply};
use crate::status::Status;

/// A transport failure (connecting, binding, a handshake).
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "transport error: {}", self.0)
    }
}

impl std::error::Error for Error {}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct Endpoint {
    uri: String,
}

impl Endpoint {
    /// Parses `rdma://host:port`.
    pub fn from_shared(uri: impl Into<String>) -> Result<Endpoint, Error> {
        Ok(Endpoint { uri: uri.into() })
    }

    /// Connects.
    pub async fn connect(&self) -> Result<Channel, Error> {
        Err(Error(format!(
            "connecting to {} is not implemented yet",
            self.uri
        )))
    }
}

/// A client connection: cheap to clone, many calls in flight.
#[derive(Debug, Clone)]
pub struct Channel {
    _private: (),
}

impl Channel {
    /// Connects to `rdma://host:port`.
    pub async fn connect(uri: impl Into<String>) -> Result<Channel, Error> {
        Endpoint::from_shared(uri)?.connect().await
    }
}

impl<M: Message + Send + 'static> Service<OutgoingCall<M>> for Channel {
    type Response = IncomingReply;
    type Error = Status;
    type Future = BoxFuture<IncomingReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Err(Status::unavailable("not implemented yet")))
    }

    fn call(&mut self, _call: OutgoingCall<M>) -> Self::Future {
        Box::pin(async { Err(Status::unavailable("not implemented yet")) })
    }
}

/// Builds and runs a server.
#[derive(Debug, Default)]
pub struct Server {
    _private: (),
}

/// A server with services added.
pub struct Router {
    _private: (),
}

impl Server {
    /// A server with default settings.
    pub fn builder() -> Server {
        Server::default()
    }

    /// Adds a service.
    pub fn add_service<S>(self, _svc: S) -> Router
    where
        S: Service<
                ServerCall,
                Response = ServerReply,
                Error = Status,
                Future = BoxFuture<ServerReply>,
            > + NamedService
            + Clone
            + Send
            + 'static,
    {
        Router { _private: () }
    }
}

impl Router {
    /// Adds another service.
    pub fn add_service<S>(self, _svc: S) -> Router
    where
        S: Service<
                ServerCall,
                Response = ServerReply,
                Error = Status,
                Future = BoxFuture<ServerReply>,
            > + NamedService
            + Clone
            + Send
            + 'static,
    {
        self
    }

    /// Serves on `addr` until an error.
    pub async fn serve(self, addr: std::net::SocketAddr) -> Result<(), Error> {
        Err(Error(format!("serving on {addr} is not implemented yet")))
    }

    /// Serves on `addr` until `signal` completes.
    pub async fn serve_with_shutdown<F: Future<Output = ()>>(
        self,
        addr: std::net::SocketAddr,
        _signal: F,
    ) -> Result<(), Error> {
        Err(Error(format!("serving on {addr} is not implemented yet")))
    }
}
