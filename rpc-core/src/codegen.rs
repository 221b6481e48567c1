//! What generated code refers to: one path to import, so generated code does not
//! depend on the user's own dependencies.

pub use async_trait::async_trait;
pub use prost;
pub use std::future::Future;
pub use std::pin::Pin;
pub use std::sync::Arc;
pub use std::task::{Context, Poll};
pub use tower::Service;

pub use futures_util::Stream;

pub use crate::client::{Grpc, IncomingReply, IncomingStream, OutgoingCall, OutgoingStream};
use crate::code::Code;
pub use crate::codec::server::{
    streaming_reply, streaming_request, unary_call_request, unary_request,
};
pub use crate::codec::{CompressionEncoding, Streaming};
pub use crate::extensions::GrpcMethod;
pub use crate::request::{IntoRequest, IntoStreamingRequest, Request};
pub use crate::response::Response;
pub use crate::server::{
    BoxFuture, BoxMessage, EncodeMessage, NamedService, ReplyBody, ServerCall, ServerReply,
};
pub use crate::service::{InterceptedService, Interceptor};
pub use crate::status::Status;
pub use crate::stream::{BoxInbound, BoxMessageSource, InboundMessages, MessageSource};
pub use crate::transport::{Channel, Endpoint, Error as TransportError};

/// Any error, as tonic's `codegen::StdError`: what `connect`'s `D::Error` converts to.
pub type StdError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The error of turning a generated client's `connect` argument into an
/// [`Endpoint`]: a transport error unchanged (a bad address), anything else by its
/// text.
pub fn endpoint_error(e: StdError) -> TransportError {
    match e.downcast::<TransportError>() {
        Ok(e) => *e,
        Err(e) => TransportError::new(e.to_string()),
    }
}

/// The message size limits of a generated client ([`Grpc`]) or server, on top of the
/// transport's own `max_message_size`: `None` is no limit of their own (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageLimits {
    /// Largest message received (a reply on a client, a request on a server).
    pub decoding: Option<usize>,
    /// Largest message sent (a request on a client, a reply on a server).
    pub encoding: Option<usize>,
}

impl MessageLimits {
    /// `OUT_OF_RANGE` for a received message of `len` bytes over the limit, in
    /// tonic's words.
    pub fn check_decoding(&self, len: usize) -> Result<(), Status> {
        match self.decoding {
            Some(limit) if len > limit => Err(decoded_too_large(len, limit)),
            _ => Ok(()),
        }
    }

    /// `OUT_OF_RANGE` for a reply to send whose encoding is over the limit, in
    /// tonic's words. Its length is computed only when there is a limit.
    pub fn check_encoding<M: prost::Message>(&self, message: &M) -> Result<(), Status> {
        self.check_encoding_as(message, Code::OutOfRange)
    }

    /// As [`MessageLimits::check_encoding`], for a client's request: `INTERNAL`, the
    /// code a tonic call fails with when its own request is over its limit (the
    /// HTTP/2 stream is reset).
    pub(crate) fn check_request_encoding<M: prost::Message>(
        &self,
        message: &M,
    ) -> Result<(), Status> {
        self.check_encoding_as(message, Code::Internal)
    }

    fn check_encoding_as<M: prost::Message>(&self, message: &M, code: Code) -> Result<(), Status> {
        match self.encoding {
            Some(limit) if message.encoded_len() > limit => {
                Err(encoded_too_large(code, message.encoded_len(), limit))
            }
            _ => Ok(()),
        }
    }
}

/// A received message of `len` bytes over `limit`: `OUT_OF_RANGE`, in tonic's words.
pub(crate) fn decoded_too_large(len: usize, limit: usize) -> Status {
    Status::out_of_range(format!(
        "Error, decoded message length too large: found {len} bytes, the limit is: {limit} bytes"
    ))
}

/// A message to send of `len` bytes encoded, over `limit`: `code`, in tonic's words.
pub(crate) fn encoded_too_large(code: Code, len: usize, limit: usize) -> Status {
    Status::new(
        code,
        format!(
            "Error, encoded message length too large: found {len} bytes, the limit is: {limit} bytes"
        ),
    )
}
