//! `MessageSource`: the outgoing half of a stream, pulled by the transport.

use std::pin::Pin;
use std::task::{Context, Poll};

use crate::status::Status;

/// A half-stream of messages the transport pulls and encodes in place.
///
/// The transport calls [`MessageSource::poll_message`] only when it can send (it has
/// the stream's credit and a send slot), so a producer that runs ahead of a slow
/// peer is simply not polled: that is the backpressure. After `Ready(Some(Ok(len)))`
/// it calls [`MessageSource::encode_current`] once with exactly `len` bytes before
/// polling again.
pub trait MessageSource: Send + 'static {
    /// Makes the next message current and says its encoded length; `Ready(None)` ends
    /// the half-stream (end of stream, the call's half-close); `Ready(Some(Err(s)))`
    /// ends it with a status (on the server, the call's final status; on the client,
    /// the call is reset with it).
    fn poll_message(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<usize, Status>>>;

    /// Encodes the current message into `out` (exactly the length `poll_message`
    /// said) and forgets it.
    ///
    /// # Panics
    /// May panic if no message is current or `out` has the wrong length.
    fn encode_current(self: Pin<&mut Self>, out: &mut [u8]);
}

/// A source owned by the transport for the life of a call.
pub type BoxMessageSource = Pin<Box<dyn MessageSource>>;

impl std::fmt::Debug for dyn MessageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MessageSource")
    }
}
