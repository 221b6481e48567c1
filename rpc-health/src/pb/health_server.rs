//! Server for the `grpc.health.v1.Health` service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::{Request, Response, Status};

use super::{HealthCheckRequest, HealthCheckResponse, CHECK, WATCH};

/// The service's full name, `grpc.health.v1.Health`, which calls are routed on.
pub const SERVICE_NAME: &str = "grpc.health.v1.Health";

/// The health service's methods. [`crate::server::health_reporter`] gives an
/// implementation whose statuses a [`crate::server::HealthReporter`] sets; implement
/// it yourself to compute health some other way. `watch` joins `check` once rdma-rpc
/// has streaming calls (see the crate docs).
#[rpc_core::async_trait]
pub trait Health: Send + Sync + 'static {
    /// The current status of `request.service` (`""`: the server as a whole). A
    /// service the server does not know ends the call with `NOT_FOUND`.
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status>;
}

/// Serves a [`Health`] implementation: add it to a `Server` with `add_service`.
pub struct HealthServer<T> {
    inner: Arc<T>,
}

impl<T> HealthServer<T> {
    /// Serves `inner`.
    pub fn new(inner: T) -> Self {
        Self::from_arc(Arc::new(inner))
    }

    /// Serves an implementation that is shared with other code.
    pub fn from_arc(inner: Arc<T>) -> Self {
        Self { inner }
    }
}

// By hand, not derived: a derive would require `T: Clone`/`T: Debug`.
impl<T> Clone for HealthServer<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> fmt::Debug for HealthServer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthServer").finish_non_exhaustive()
    }
}

impl<T: Health> tower::Service<ServerCall> for HealthServer<T> {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        match call.path() {
            CHECK => {
                let request = match call.into_request::<HealthCheckRequest>() {
                    Ok(request) => request,
                    Err(status) => return Box::pin(async move { Err(status) }),
                };
                let inner = Arc::clone(&self.inner);
                Box::pin(async move {
                    let response = <T as Health>::check(&inner, request).await?;
                    Ok(response.map(ReplyBody::message))
                })
            }
            // UNIMPLEMENTED, not any other code: the health specification tells
            // clients to read it as "Watch is not offered" and not to retry.
            WATCH => Box::pin(async move {
                Err(Status::unimplemented(
                    "grpc.health.v1.Health/Watch streams its replies, and rdma-rpc has no \
                     streaming calls yet: call Check instead",
                ))
            }),
            _ => {
                let message = if call.service() == SERVICE_NAME {
                    format!(
                        "method {} not found in service {SERVICE_NAME}",
                        call.method()
                    )
                } else {
                    format!(
                        "service {} not found (this is {SERVICE_NAME})",
                        call.service()
                    )
                };
                Box::pin(async move { Err(Status::unimplemented(message)) })
            }
        }
    }
}

impl<T> NamedService for HealthServer<T> {
    const NAME: &'static str = SERVICE_NAME;
}
