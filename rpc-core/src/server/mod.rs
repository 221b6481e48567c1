//! What generated server code implements and the transport's server dispatches to.

mod call;
mod reply;

pub use call::ServerCall;
pub use reply::{BoxFuture, BoxMessage, EncodeMessage, ServerReply};

/// A service with a fully qualified name (`package.Service`), used for routing.
pub trait NamedService {
    /// `package.Service`.
    const NAME: &'static str;
}
