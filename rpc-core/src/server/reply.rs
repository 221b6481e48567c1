//! What a server method returns, type-erased for the router.

use std::future::Future;
use std::pin::Pin;

use prost::Message;

use crate::response::Response;
use crate::status::Status;

/// A message the transport can encode straight into a send slot.
pub trait EncodeMessage: Send + 'static {
    /// Bytes [`EncodeMessage::encode_to`] will write.
    fn encoded_len(&self) -> usize;
    /// Writes the encoding into `out` (at least `encoded_len()` bytes long).
    fn encode_to(&self, out: &mut [u8]);
}

impl<M: Message + Send + 'static> EncodeMessage for M {
    fn encoded_len(&self) -> usize {
        Message::encoded_len(self)
    }

    fn encode_to(&self, mut out: &mut [u8]) {
        self.encode_raw(&mut out);
    }
}

/// A boxed response message.
pub type BoxMessage = Box<dyn EncodeMessage>;

/// A server method's outcome: a response to encode, or a status.
pub type ServerReply = Response<BoxMessage>;

/// The future a generated server returns for one call.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Status>> + Send + 'static>>;
