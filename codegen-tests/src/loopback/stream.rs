//! Streaming calls over the loopback: each half-stream is a pump task that pulls the
//! sender's [`MessageSource`] only when the bounded queue to the receiver has room,
//! as the RC transport polls a source only when the peer granted a credit. A reader
//! that stops reading therefore stops its producer, after [`QUEUE_BOUND`] messages.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_util::future::poll_fn;
use rpc_core::client::{IncomingStream, OutgoingStream};
use rpc_core::server::{BoxFuture, ReplyBody, ServerCall, ServerReply};
use rpc_core::stream::{BoxMessageSource, InboundMessages};
use rpc_core::{MetadataMap, Payload, Status};
use tokio::sync::mpsc;
use tower::Service;

use super::{encode_reply, Loopback};

/// Messages a half-stream holds between its producer and its reader.
pub const QUEUE_BOUND: usize = 4;

type Item = Result<Payload, Status>;

impl<S> Service<OutgoingStream> for Loopback<S>
where
    S: Service<ServerCall, Response = ServerReply, Error = Status, Future = BoxFuture<ServerReply>>,
{
    type Response = IncomingStream;
    type Error = Status;
    type Future = BoxFuture<IncomingStream>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        self.server.poll_ready(cx)
    }

    /// Opens the call: the server's handler starts at once with the client's
    /// messages as its inbound stream; the returned future resolves when the handler
    /// returned its `Response` (before any reply message), or with its error.
    fn call(&mut self, call: OutgoingStream) -> Self::Future {
        self.record(call.path);
        let (to_server, server_inbound) = mpsc::channel(QUEUE_BOUND);
        let (to_client, client_inbound) = mpsc::channel(QUEUE_BOUND);
        let client_inbound = ChannelInbound::new(client_inbound, Some(self.trailers.clone()));
        let server_inbound = ChannelInbound::new(server_inbound, None);
        // A client source that fails resets the call: its status reaches both ends.
        tokio::spawn(pump(call.messages, to_server, Some(to_client.clone())));
        let path_len = call.path.len();
        let server_call = ServerCall::from_parts(
            Payload::from_vec(call.path.as_bytes().to_vec()),
            0..path_len,
            path_len..path_len,
            call.metadata,
            call.timeout,
        );
        let reply = match server_call {
            Ok(c) => self.server.call(c.with_inbound(Box::pin(server_inbound))),
            Err(status) => return Box::pin(async move { Err(status) }),
        };
        Box::pin(async move {
            let (metadata, body, _) = reply.await?.into_parts();
            match body {
                ReplyBody::Message(message) => {
                    let payload = Payload::from_vec(encode_reply(&*message));
                    // The queue is new and empty: room for the one message.
                    to_client
                        .try_send(Ok(payload))
                        .expect("a new queue has room");
                }
                ReplyBody::Stream(source) => {
                    tokio::spawn(pump(source, to_client, None));
                }
            }
            Ok(IncomingStream {
                metadata,
                messages: Box::pin(client_inbound),
            })
        })
    }
}

/// Moves `source`'s messages, encoded, into `queue` while the reader keeps it from
/// filling up; ends the reader's stream with the source's end or error. Stops (and
/// drops the source, which its producer sees) when the reader goes away.
async fn pump(
    mut source: BoxMessageSource,
    queue: mpsc::Sender<Item>,
    reset: Option<mpsc::Sender<Item>>,
) {
    loop {
        // Room first, then the next message: the source is polled only when it can
        // be sent.
        let Ok(permit) = queue.reserve().await else {
            return;
        };
        match poll_fn(|cx| source.as_mut().poll_message(cx)).await {
            Some(Ok(len)) => {
                let mut bytes = vec![0; len];
                source.as_mut().encode_current(&mut bytes);
                permit.send(Ok(Payload::from_vec(bytes)));
            }
            Some(Err(status)) => {
                if let Some(reset) = reset {
                    let _ = reset.send(Err(status.clone())).await;
                }
                permit.send(Err(status));
                return;
            }
            // Dropping the queue's sender is the end of the stream.
            None => return,
        }
    }
}

/// The reading end of a half-stream.
struct ChannelInbound {
    queue: mpsc::Receiver<Item>,
    /// Given once the stream ended OK (the client's side only).
    trailers: Option<MetadataMap>,
    ended_ok: bool,
    /// A status ended the stream: nothing follows it.
    failed: bool,
}

impl ChannelInbound {
    fn new(queue: mpsc::Receiver<Item>, trailers: Option<MetadataMap>) -> Self {
        ChannelInbound {
            queue,
            trailers,
            ended_ok: false,
            failed: false,
        }
    }
}

impl InboundMessages for ChannelInbound {
    fn poll_message(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let item = ready!(self.queue.poll_recv(cx));
        match &item {
            None => self.ended_ok = true,
            Some(Err(_)) => self.failed = true,
            Some(Ok(_)) => {}
        }
        Poll::Ready(item)
    }

    fn trailers(mut self: Pin<&mut Self>) -> Option<MetadataMap> {
        if self.ended_ok {
            self.trailers.take()
        } else {
            None
        }
    }
}
