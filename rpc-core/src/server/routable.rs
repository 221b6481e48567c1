//! `RoutableService`: what a server's `add_service` accepts; `CallService`: what a
//! server runs calls on.

use tower::Service;

use super::{NamedService, ServerCall, ServerReply};

/// An error a route's service may end a call with; the server turns it into a
/// `Status` once (see [`crate::Status::from_error`]).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A tower service a server can run calls on: a route's service, or the whole stack
/// that [`Server::layer`](crate::transport::Server::layer) builds around a server's
/// [`Routes`](crate::service::Routes). Implemented for every such service; it only
/// names the bounds once.
pub trait CallService:
    Service<ServerCall, Response = ServerReply, Error: Into<BoxError>, Future: Send + 'static>
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> CallService for S where
    S: Service<ServerCall, Response = ServerReply, Error: Into<BoxError>, Future: Send + 'static>
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// A tower service a server can route calls to: a generated `<Svc>Server`, or any
/// stack of middleware around one (its name is the inner service's, through
/// [`NamedService`]). Implemented for every such service; it only names the bounds
/// once.
pub trait RoutableService: CallService + NamedService {}

impl<S: CallService + NamedService> RoutableService for S {}
