//! A transport without a network: what the RDMA transport does between two
//! processes, done in one, so generated clients and servers can be tested together.
//! Unary calls here; streaming calls (`Service<OutgoingStream>`) in [`stream`].

mod stream;

pub use stream::QUEUE_BOUND;

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use prost::Message;
use rpc_core::client::{IncomingReply, OutgoingCall};
use rpc_core::server::{BoxFuture, EncodeMessage, ReplyBody, ServerCall, ServerReply};
use rpc_core::{MetadataMap, Payload, Status};
use tower::Service;

/// A frame as the server's transport would receive it: `path` then the encoded body.
pub fn server_call(path: &str, body: &[u8], metadata: MetadataMap) -> Result<ServerCall, Status> {
    let mut frame = path.as_bytes().to_vec();
    frame.extend_from_slice(body);
    let len = frame.len();
    ServerCall::from_parts(
        Payload::from_vec(frame),
        0..path.len(),
        path.len()..len,
        metadata,
        None,
    )
}

/// The bytes the server's transport would send back for a reply.
pub fn encode_reply(message: &dyn EncodeMessage) -> Vec<u8> {
    let mut bytes = vec![0; message.encoded_len()];
    message.encode_to(&mut bytes);
    bytes
}

/// A client transport (`Service<OutgoingCall<M>>`) that hands each call, encoded,
/// to a server service (`Service<ServerCall>`, e.g. a generated `GreeterServer`) and
/// returns its encoded reply. Records the path of every call.
///
/// Streaming calls are connected message by message over bounded queues (see
/// [`stream`]).
#[derive(Debug, Clone)]
pub struct Loopback<S> {
    server: S,
    paths: Arc<Mutex<Vec<&'static str>>>,
    /// What a streaming call that ends OK gives the client as its trailers.
    trailers: MetadataMap,
}

impl<S> Loopback<S> {
    /// Calls go to `server`.
    pub fn new(server: S) -> Self {
        Loopback {
            server,
            paths: Arc::default(),
            trailers: MetadataMap::new(),
        }
    }

    /// Streaming calls that end OK end with `trailers` (as a server's transport
    /// would send them with the final status).
    #[must_use]
    pub fn with_trailers(mut self, trailers: MetadataMap) -> Self {
        self.trailers = trailers;
        self
    }

    /// The paths of the calls made so far, in order.
    pub fn paths(&self) -> Vec<&'static str> {
        self.paths.lock().expect("not poisoned").clone()
    }

    fn record(&self, path: &'static str) {
        self.paths.lock().expect("not poisoned").push(path);
    }
}

impl<S, M> Service<OutgoingCall<M>> for Loopback<S>
where
    S: Service<ServerCall, Response = ServerReply, Error = Status, Future = BoxFuture<ServerReply>>,
    M: Message,
{
    type Response = IncomingReply;
    type Error = Status;
    type Future = BoxFuture<IncomingReply>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        self.server.poll_ready(cx)
    }

    fn call(&mut self, call: OutgoingCall<M>) -> Self::Future {
        self.record(call.path);
        let mut frame = call.path.as_bytes().to_vec();
        let path_len = frame.len();
        frame.extend_from_slice(&call.message.encode_to_vec());
        let body = path_len..frame.len();
        let server_call = ServerCall::from_parts(
            Payload::from_vec(frame),
            0..path_len,
            body,
            call.metadata,
            call.timeout,
        );
        let reply = match server_call {
            Ok(server_call) => self.server.call(server_call),
            Err(status) => return Box::pin(async move { Err(status) }),
        };
        Box::pin(async move {
            let (metadata, body, _) = reply.await?.into_parts();
            let ReplyBody::Message(message) = body else {
                return Err(Status::unimplemented("the unary loopback has no streams"));
            };
            Ok(IncomingReply {
                metadata,
                payload: Payload::from_vec(encode_reply(&*message)),
            })
        })
    }
}
