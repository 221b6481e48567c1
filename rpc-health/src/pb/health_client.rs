//! Client for the `grpc.health.v1.Health` service.

use rpc_core::client::{Grpc, IncomingReply, OutgoingCall};
use rpc_core::codegen::{endpoint_error, StdError};
use rpc_core::transport::{Channel, Endpoint, Error as TransportError};
use rpc_core::{IntoRequest, Response, Status};
use tower::Service;

use super::{HealthCheckRequest, HealthCheckResponse, CHECK};

/// Asks a server for the health of its services.
///
/// `T` is any transport service: a [`Channel`] in production, a mock or a middleware
/// stack in tests. There is no `watch` until rdma-rpc has streaming calls (see the
/// crate docs).
#[derive(Debug, Clone)]
pub struct HealthClient<T> {
    inner: Grpc<T>,
}

impl HealthClient<Channel> {
    /// Connects to `dst`: an address (`"rdma://host:port"`, a `String`) or an
    /// `Endpoint` with settings, as tonic-health's (and generated clients'), and
    /// returns a client over the new channel.
    pub async fn connect<D>(dst: D) -> Result<Self, TransportError>
    where
        D: TryInto<Endpoint>,
        D::Error: Into<StdError>,
    {
        let endpoint = dst.try_into().map_err(|e| endpoint_error(e.into()))?;
        let channel = endpoint.connect().await?;
        Ok(Self::new(channel))
    }
}

impl<T> HealthClient<T> {
    /// Wraps a transport service: a `Channel`, or any
    /// `tower::Service<OutgoingCall<HealthCheckRequest>>` (a mock, a middleware stack).
    pub fn new(inner: T) -> Self {
        Self {
            inner: Grpc::new(inner),
        }
    }

    /// The current status of `request.service` (`""`: the server as a whole). A
    /// service the server does not know ends the call with `NOT_FOUND`.
    pub async fn check(
        &mut self,
        request: impl IntoRequest<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status>
    where
        T: Service<OutgoingCall<HealthCheckRequest>, Response = IncomingReply, Error = Status>,
    {
        self.inner.unary(request.into_request(), CHECK).await
    }
}
