//! `InboundMessages`: the incoming half of a stream, as the transport delivers it.

use std::ops::Range;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

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
///
/// `Sync` so that [`crate::Streaming`] is, as tonic's: a task may hold a reference
/// to one across an await.
pub trait InboundMessages: Send + Sync + 'static {
    /// The next received message.
    fn poll_message(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Payload, Status>>>;

    /// The trailing metadata of a call that ended OK, once `poll_message` returned
    /// `Ready(None)` (on the client; the server's inbound stream has none and says
    /// `None`).
    fn trailers(self: Pin<&mut Self>) -> Option<MetadataMap>;

    /// The next received message, handed to `read` where it lies: `Ready(Some(Ok(())))`
    /// once `read` had it, else as [`InboundMessages::poll_message`]. A transport
    /// that holds several messages in one buffer (a batch frame) lends each in
    /// place, so decoding it costs no buffer handle of its own; the default hands
    /// over what `poll_message` gives.
    fn poll_message_in_place(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        read: &mut dyn FnMut(MessageBytes<'_>),
    ) -> Poll<Option<Result<(), Status>>> {
        Poll::Ready(match ready!(self.poll_message(cx)) {
            Some(Ok(p)) => {
                read(MessageBytes::Payload(p));
                Some(Ok(()))
            }
            Some(Err(s)) => Some(Err(s)),
            None => None,
        })
    }
}

/// One received message, as [`InboundMessages::poll_message_in_place`] lends it.
#[derive(Debug)]
pub enum MessageBytes<'a> {
    /// The message's own bytes.
    Payload(Payload),
    /// Bytes `range` of a buffer other messages came in too.
    Shared(&'a bytes::Bytes, Range<usize>),
}

/// An inbound half-stream owned by its reader.
pub type BoxInbound = Pin<Box<dyn InboundMessages>>;

impl std::fmt::Debug for dyn InboundMessages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InboundMessages")
    }
}
