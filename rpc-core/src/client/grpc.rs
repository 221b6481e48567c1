//! `Grpc<T>`: calls of the four shapes over any transport service.

use futures_util::Stream;
use prost::Message;
use tower::{Service, ServiceExt};

use crate::client::call::{IncomingReply, IncomingStream, OutgoingCall, OutgoingStream};
use crate::codec::{MessageStreamSource, Side, Streaming};
use crate::codegen::MessageLimits;
use crate::extensions::Extensions;
use crate::metadata::{KeyAndValueRef, MetadataMap};
use crate::request::Request;
use crate::response::Response;
use crate::status::Status;

/// Wraps a transport service `T` (normally [`crate::transport::Channel`]) and runs
/// calls on it: checks the message size limits, waits for readiness (a credit and a
/// send slot), sends, decodes.
#[derive(Debug, Clone)]
pub struct Grpc<T> {
    inner: T,
    limits: MessageLimits,
}

impl<T> Grpc<T> {
    /// Wraps a transport service.
    pub fn new(inner: T) -> Self {
        Grpc {
            inner,
            limits: MessageLimits::default(),
        }
    }

    /// The transport service.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Fails a reply whose encoded message is over `limit` bytes with
    /// `RESOURCE_EXHAUSTED`. Default: no limit of its own, only the transport's
    /// ([`Endpoint::max_message_size`](crate::transport::Endpoint::max_message_size)),
    /// where tonic's default is 4 MiB: rdma-rpc is for large messages too.
    #[must_use]
    pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
        self.limits.decoding = Some(limit);
        self
    }

    /// Fails a request whose encoded message is over `limit` bytes with
    /// `RESOURCE_EXHAUSTED`, before anything is sent. Default: no limit of its own,
    /// only the transport's (as tonic's, which has none).
    #[must_use]
    pub fn max_encoding_message_size(mut self, limit: usize) -> Self {
        self.limits.encoding = Some(limit);
        self
    }

    /// Runs one unary call of `path`.
    pub async fn unary<M1, M2>(
        &mut self,
        request: Request<M1>,
        path: &'static str,
    ) -> Result<Response<M2>, Status>
    where
        T: Service<OutgoingCall<M1>, Response = IncomingReply, Error = Status>,
        M1: Message + Send + 'static,
        M2: Message + Default,
    {
        self.limits.check_request_encoding(request.get_ref())?;
        let call = OutgoingCall::new(path, request);
        let reply = self.inner.ready().await?.call(call).await?;
        self.limits.check_decoding(reply.payload.as_slice().len())?;
        reply.decode()
    }

    /// Runs one server-streaming call of `path`: `request` goes as a stream of one
    /// message, and the reply's messages are read from the returned `Streaming`.
    /// Resolves once the server's handler returned its `Response` (with the
    /// response metadata), before any message.
    pub async fn server_streaming<M1, M2>(
        &mut self,
        request: Request<M1>,
        path: &'static str,
    ) -> Result<Response<Streaming<M2>>, Status>
    where
        T: Service<OutgoingStream, Response = IncomingStream, Error = Status>,
        M1: Message + Send + 'static,
        M2: Message + Default,
    {
        self.limits.check_request_encoding(request.get_ref())?;
        let request = request.map(|m| futures_util::stream::iter(Some(m)));
        self.streaming(request, path).await
    }

    /// Runs one client-streaming call of `path`: sends `request`'s messages, and
    /// returns the server's one reply message, with the call's trailers merged into
    /// the response metadata (as tonic's). A reply of no message, or of more than
    /// one, is `INTERNAL`.
    pub async fn client_streaming<S, M1, M2>(
        &mut self,
        request: Request<S>,
        path: &'static str,
    ) -> Result<Response<M2>, Status>
    where
        T: Service<OutgoingStream, Response = IncomingStream, Error = Status>,
        S: Stream<Item = M1> + Send + 'static,
        M1: Message + Send + 'static,
        M2: Message + Default,
    {
        let (mut metadata, mut replies, extensions) = self
            .streaming::<S, M1, M2>(request, path)
            .await?
            .into_parts();
        let message = replies
            .message()
            .await?
            .ok_or_else(|| Status::internal(format!("{path}: missing response message")))?;
        if replies.message().await?.is_some() {
            return Err(Status::internal(format!(
                "{path}: more than one response message to a client-streaming call"
            )));
        }
        if let Some(trailers) = replies.trailers().await? {
            merge(&mut metadata, &trailers);
        }
        Ok(Response::from_parts(metadata, message, extensions))
    }

    /// Runs one bidirectional call of `path`: the transport sends `request`'s
    /// messages as the server grants room, while the reply's are read from the
    /// returned `Streaming`. Resolves once the server's handler returned its
    /// `Response`, before any message, so a ping-pong (send one, read one) works.
    pub async fn streaming<S, M1, M2>(
        &mut self,
        request: Request<S>,
        path: &'static str,
    ) -> Result<Response<Streaming<M2>>, Status>
    where
        T: Service<OutgoingStream, Response = IncomingStream, Error = Status>,
        S: Stream<Item = M1> + Send + 'static,
        M1: Message + Send + 'static,
    {
        let timeout = request.call_timeout();
        let (metadata, extensions, messages) = request.into_parts();
        let call = OutgoingStream {
            path,
            metadata,
            timeout,
            extensions,
            messages: Box::pin(MessageStreamSource::requests(
                messages,
                self.limits.encoding,
            )),
        };
        let reply = self.inner.ready().await?.call(call).await?;
        let messages = Streaming::new(reply.messages, self.limits.decoding, Side::Client);
        Ok(Response::from_parts(
            reply.metadata,
            messages,
            Extensions::new(),
        ))
    }
}

/// Appends every entry of `from` to `into`.
fn merge(into: &mut MetadataMap, from: &MetadataMap) {
    for entry in from.iter() {
        match entry {
            KeyAndValueRef::Ascii(k, v) => {
                into.append(k.clone(), v.clone());
            }
            KeyAndValueRef::Binary(k, v) => {
                into.append_bin(k.clone(), v.clone());
            }
        }
    }
}
