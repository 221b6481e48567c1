//! `InboundMessages`: the incoming half of a stream, as the transport delivers it.

use std::pin::Pin;
use std::task::{Context, Poll};

use crate::metadata::MetadataMap;
use crate::payload::Payload;
use crate::status::Status;

/// Received messages of one half-stream, still encoded.
///
/// `Ready(None)` is end of stream with status OK; `Ready(Some(Err(s)))` ends it with
/// `s` (the server's final status, a reset, a dead connection, a deadline) and
/// nothing follows. Taking a message is what lets the transport grant the peer room
/// for another, so a reader that stops reading stops only this stream's producer.
///
/// Dropping it before the end tells the transport this side wants no more: on the
/// client that cancels the call; on the server it discards what the client still
/// sends (the handler may go on answering, as in gRPC).
pub trait InboundMessages: Send + 'static {
    /// The next received message.
    fn poll_message(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Payload, Status>>>;

    /// The trailing metadata of a call that ended OK, once `poll_message` returned
    /// `Ready(None)` (on the client; the server's inbound stream has none and says
    /// `None`).
    fn trailers(self: Pin<&mut Self>) -> Option<MetadataMap>;
}

/// An inbound half-stream owned by its reader.
pub type BoxInbound = Pin<Box<dyn InboundMessages>>;

impl std::fmt::Debug for dyn InboundMessages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InboundMessages")
    }
}
