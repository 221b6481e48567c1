//! `Grpc<T>`: unary calls over any transport service.

use prost::Message;
use tower::{Service, ServiceExt};

use crate::client::call::{IncomingReply, OutgoingCall};
use crate::request::Request;
use crate::response::Response;
use crate::status::Status;

/// Wraps a transport service `T` (normally [`crate::transport::Channel`]) and runs
/// calls on it: waits for readiness (a credit and a send slot), sends, decodes.
#[derive(Debug, Clone)]
pub struct Grpc<T> {
    inner: T,
}

impl<T> Grpc<T> {
    /// Wraps a transport service.
    pub fn new(inner: T) -> Self {
        Grpc { inner }
    }

    /// The transport service.
    pub fn get_ref(&self) -> &T {
        &self.inner
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
        let call = OutgoingCall::new(path, request);
        let reply = self.inner.ready().await?.call(call).await?;
        reply.decode()
    }
}
