//! What generated server code implements and the transport's server dispatches to.

mod call;
mod named;
mod reply;
mod routable;

pub use call::ServerCall;
pub use named::NamedService;
pub use reply::{BoxFuture, BoxMessage, EncodeMessage, ReplyBody, ServerReply};
pub use routable::{BoxError, CallService, RoutableService};
