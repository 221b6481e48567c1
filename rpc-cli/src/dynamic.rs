//! Calls of a method known only by its descriptor, through rpc-core's client API as
//! any custom message type would make them: the request is anything `prost` can
//! encode (a `DynamicMessage`, or bytes encoded once), and the reply is decoded
//! here, from the bytes the transport hands over.

use std::future::poll_fn;
use std::time::Duration;

use futures_util::Stream;
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor, MethodDescriptor};
use rpc_core::client::{IncomingReply, IncomingStream, OutgoingCall, OutgoingStream};
use rpc_core::codec::MessageStreamSource;
use rpc_core::metadata::MetadataMap;
use rpc_core::stream::BoxInbound;
use rpc_core::transport::Channel;
use rpc_core::{Extensions, Payload, Status};
use tower::{Service, ServiceExt};

/// The transport's path of `method`, `/package.Service/Method`. Leaked: calls take
/// a `&'static str`, and a command calls one method (or a few) for its whole run.
pub(crate) fn path_of(method: &MethodDescriptor) -> &'static str {
    let path = format!("/{}/{}", method.parent_service().full_name(), method.name());
    Box::leak(path.into_boxed_str())
}

/// One unary call; the reply undecoded.
pub(crate) async fn unary<M>(
    channel: &mut Channel,
    path: &'static str,
    metadata: MetadataMap,
    timeout: Option<Duration>,
    message: M,
) -> Result<IncomingReply, Status>
where
    M: Message + Send + 'static,
{
    let call = OutgoingCall {
        path,
        metadata,
        timeout,
        extensions: Extensions::new(),
        message,
    };
    ServiceExt::<OutgoingCall<M>>::ready(channel)
        .await?
        .call(call)
        .await
}

/// One streaming call (any shape but unary): `messages` are sent as the server
/// grants room while the replies are read from the returned stream.
pub(crate) async fn streaming<S, M>(
    channel: &mut Channel,
    path: &'static str,
    metadata: MetadataMap,
    timeout: Option<Duration>,
    messages: S,
) -> Result<IncomingStream, Status>
where
    S: Stream<Item = Result<M, Status>> + Send + 'static,
    M: Message + Send + 'static,
{
    let call = OutgoingStream {
        path,
        metadata,
        timeout,
        extensions: Extensions::new(),
        messages: Box::pin(MessageStreamSource::new(messages, None)),
    };
    ServiceExt::<OutgoingStream>::ready(channel)
        .await?
        .call(call)
        .await
}

/// The next reply of a stream, undecoded; `None` once it ended OK.
pub(crate) async fn next_reply(replies: &mut BoxInbound) -> Option<Result<Payload, Status>> {
    poll_fn(|cx| replies.as_mut().poll_message(cx)).await
}

/// `payload` as a message of type `desc` (a reply that does not decode is
/// `INTERNAL`, as a generated client has it).
pub(crate) fn decode(
    desc: &MessageDescriptor,
    payload: &Payload,
) -> Result<DynamicMessage, Status> {
    DynamicMessage::decode(desc.clone(), payload.as_slice()).map_err(|e| {
        Status::internal(format!(
            "failed to decode response message as {}: {e}",
            desc.full_name()
        ))
    })
}
