//! `RoutableService`: what a server's `add_service` accepts.

use tower::Service;

use super::{NamedService, ServerCall, ServerReply};

/// An error a route's service may end a call with; the server turns it into a
/// `Status` once (see [`crate::Status::from_error`]).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A tower service a server can route calls to: a generated `<Svc>Server`, or any
/// stack of middleware around one (its name is the inner service's, through
/// [`NamedService`]). Implemented for every such service; it only names the bounds
/// once.
pub trait RoutableService:
    Service<ServerCall, Response = ServerReply, Error: Into<BoxError>, Future: Send + 'static>
    + NamedService
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> RoutableService for S where
    S: Service<ServerCall, Response = ServerReply, Error: Into<BoxError>, Future: Send + 'static>
        + NamedService
        + Clone
        + Send
        + Sync
        + 'static
{
}
