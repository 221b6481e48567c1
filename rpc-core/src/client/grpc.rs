//! `Grpc<T>`: unary calls over any transport service.

use prost::Message;
use tower::{Service, ServiceExt};

use crate::client::call::{IncomingReply, OutgoingCall};
use crate::codegen::MessageLimits;
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
        self.limits.check_encoding(request.get_ref())?;
        let call = OutgoingCall::new(path, request);
        let reply = self.inner.ready().await?.call(call).await?;
        self.limits.check_decoding(reply.payload.as_slice().len())?;
        reply.decode()
    }
}
