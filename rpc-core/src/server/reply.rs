//! What a server method returns, type-erased for the router.

use std::future::Future;
use std::pin::Pin;

use prost::Message;
use rpc_transport::msg::GatherWriter;

use crate::response::Response;
use crate::status::Status;
use crate::stream::BoxMessageSource;

/// A message the transport can encode straight into a send slot.
pub trait EncodeMessage: Send + 'static {
    /// Bytes [`EncodeMessage::encode_to`] will write.
    fn encoded_len(&self) -> usize;
    /// Writes the encoding into `out` (at least `encoded_len()` bytes long).
    fn encode_to(&self, out: &mut [u8]);
    /// The encoding in memory of its own (a message too big for one slot).
    fn encode_to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.encoded_len()];
        self.encode_to(&mut v);
        v
    }
    /// Encodes through `w`, which references the bytes that lie in registered
    /// memory instead of copying them (a large response lent where it lies);
    /// `false` when this message cannot be encoded so (it is then copied).
    fn encode_gathered(&self, w: &mut GatherWriter<'_>) -> bool {
        let _ = w;
        false
    }
}

impl<M: Message + Send + 'static> EncodeMessage for M {
    fn encoded_len(&self) -> usize {
        Message::encoded_len(self)
    }

    fn encode_to(&self, mut out: &mut [u8]) {
        self.encode_raw(&mut out);
    }

    fn encode_to_vec(&self) -> Vec<u8> {
        // Appends into reserved capacity: no zero-fill of a many-megabyte buffer.
        Message::encode_to_vec(self)
    }

    fn encode_gathered(&self, w: &mut GatherWriter<'_>) -> bool {
        self.encode_raw(w);
        true
    }
}

impl std::fmt::Debug for dyn EncodeMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncodeMessage({} bytes)", self.encoded_len())
    }
}

/// A boxed response message.
pub type BoxMessage = Box<dyn EncodeMessage>;

/// What a server method answers with: one message (unary and client-streaming
/// methods), or a stream of them (server-streaming and bidirectional methods).
#[derive(Debug)]
pub enum ReplyBody {
    /// The only response message; the call ends OK once it is sent.
    Message(BoxMessage),
    /// Response messages as the handler produces them; the call ends with the
    /// stream's end (OK) or its first error (that status).
    Stream(BoxMessageSource),
}

impl ReplyBody {
    /// A body of one message.
    pub fn message(m: impl EncodeMessage) -> ReplyBody {
        ReplyBody::Message(Box::new(m))
    }
}

impl From<BoxMessage> for ReplyBody {
    fn from(m: BoxMessage) -> ReplyBody {
        ReplyBody::Message(m)
    }
}

impl From<BoxMessageSource> for ReplyBody {
    fn from(s: BoxMessageSource) -> ReplyBody {
        ReplyBody::Stream(s)
    }
}

/// A server method's outcome: a response to encode (or stream), or a status.
pub type ServerReply = Response<ReplyBody>;

/// The future a generated server returns for one call.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Status>> + Send + 'static>>;
