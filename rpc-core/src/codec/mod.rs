//! Typed streams over the transport's half-streams, as tonic's `codec` module:
//! [`Streaming`] decodes the messages a peer streams, and the sources here encode the
//! messages of a `Stream` for the transport to send.
//!
//! Neither side allocates per message: a received message is decoded straight from
//! the bytes the transport hands over, and a sent one is held (typed) until the
//! transport encodes it into its send slot.

mod compression;
pub(crate) mod server;
mod shared_buf;
mod source;
mod streaming;

pub use compression::CompressionEncoding;
pub use source::{MessageStreamSource, RequestStream};
pub(crate) use streaming::Side;
pub use streaming::Streaming;
