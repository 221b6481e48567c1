//! Streaming calls, as the transport sees them: one half-stream of encoded messages
//! going out ([`MessageSource`]) and one coming in ([`InboundMessages`]).
//!
//! This is the seam between the typed API (`Streaming<T>`, generated stubs) and the
//! transports (the RC engine, the in-memory loopback of the codegen tests). Both
//! sides move messages one at a time with no allocation per message: a source makes
//! its next message *current* and the transport encodes it straight into a send slot;
//! an inbound stream hands out received bytes still in their receive slot (or owned,
//! when the transport had to copy them out).
//!
//! A streaming call on the client is a [`crate::client::OutgoingStream`] answered by
//! a [`crate::client::IncomingStream`]; on the server it is a
//! [`crate::server::ServerCall`] carrying [`ServerCall::take_inbound`] and answered
//! by a [`crate::server::ReplyBody::Stream`].
//!
//! [`ServerCall::take_inbound`]: crate::server::ServerCall::take_inbound

mod inbound;
mod source;

pub use inbound::{BoxInbound, InboundMessages, MessageBytes};
pub use source::{BoxMessageSource, MessageSource};
