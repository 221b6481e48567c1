//! What a client hands to its transport service, and what it gets back.

use std::time::Duration;

use prost::Message;

use crate::extensions::Extensions;
use crate::metadata::MetadataMap;
use crate::payload::Payload;
use crate::request::Request;
use crate::response::Response;
use crate::status::Status;
use crate::stream::{BoxInbound, BoxMessageSource};

/// One unary call on its way out: the transport encodes `message` straight into a
/// registered send slot, so it stays typed until then.
#[derive(Debug)]
pub struct OutgoingCall<M> {
    /// `/package.Service/Method`.
    pub path: &'static str,
    /// Request metadata.
    pub metadata: MetadataMap,
    /// Time the call may take.
    pub timeout: Option<Duration>,
    /// The request's extensions: read by interceptors and layers of the client's
    /// stack; they never travel.
    pub extensions: Extensions,
    /// The request message.
    pub message: M,
}

impl<M> OutgoingCall<M> {
    /// A call of `path` carrying `request`.
    pub fn new(path: &'static str, request: Request<M>) -> Self {
        let timeout = request.call_timeout();
        let (metadata, extensions, message) = request.into_parts();
        OutgoingCall {
            path,
            metadata,
            timeout,
            extensions,
            message,
        }
    }
}

/// A streaming call on its way out (any shape but unary): the transport opens the
/// call, then pulls `messages` as the peer grants room, and ends the client's
/// half-stream when the source ends.
#[derive(Debug)]
pub struct OutgoingStream {
    /// `/package.Service/Method`.
    pub path: &'static str,
    /// Request metadata.
    pub metadata: MetadataMap,
    /// Time the whole call may take (every message of both directions).
    pub timeout: Option<Duration>,
    /// The request's extensions (see [`OutgoingCall::extensions`]).
    pub extensions: Extensions,
    /// The request messages.
    pub messages: BoxMessageSource,
}

/// A streaming call the server answered: its response metadata, known once the
/// server's handler returned its `Response` (before any message), and the response
/// messages, ended by the call's final status.
#[derive(Debug)]
pub struct IncomingStream {
    /// Response metadata (the headers).
    pub metadata: MetadataMap,
    /// Response messages, then the trailers or the status that ended the call.
    pub messages: BoxInbound,
}

/// A successful reply as received: metadata and the undecoded message bytes.
#[derive(Debug)]
pub struct IncomingReply {
    /// Response metadata.
    pub metadata: MetadataMap,
    /// Encoded response message.
    pub payload: Payload,
}

impl IncomingReply {
    /// Decodes the message (a reply that does not decode is `INTERNAL`, as in tonic);
    /// the payload's receive slot is released when this returns.
    pub fn decode<M: Message + Default>(self) -> Result<Response<M>, Status> {
        let len = self.payload.as_slice().len();
        let message = self
            .payload
            .decode(0..len)
            .map_err(|e| Status::internal(format!("failed to decode response message: {e}")))?;
        Ok(Response::from_parts(
            self.metadata,
            message,
            Extensions::new(),
        ))
    }
}
