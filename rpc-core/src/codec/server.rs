//! What generated servers call to run streaming methods: a [`ServerCall`] to a
//! typed request, a handler's stream to a reply.
//!
//! Every call of a non-unary method carries the client's messages on its inbound
//! stream ([`ServerCall::take_inbound`]), the request of a server-streaming method
//! too: the client sends it as a stream of one message, and the server reads the
//! first message as the request.

use futures_util::Stream;
use prost::Message;

use super::{MessageStreamSource, Side, Streaming};
use crate::codegen::MessageLimits;
use crate::request::Request;
use crate::response::Response;
use crate::server::{ReplyBody, ServerCall, ServerReply};
use crate::status::Status;

/// The request of a unary method: the call's message, decoded, within the decoding
/// limit (checked before decoding).
///
/// # Errors
/// `RESOURCE_EXHAUSTED` over the limit; `INVALID_ARGUMENT` for a body that does not
/// decode; `INTERNAL` for a call that streams its messages (a client whose proto
/// says the method streams): refused rather than run on an empty message.
#[inline]
pub fn unary_call_request<M: Message + Default>(
    call: ServerCall,
    limits: MessageLimits,
) -> Result<Request<M>, Status> {
    if call.is_streaming() {
        return Err(Status::internal(format!(
            "{} is a unary method, but the call streams its messages",
            call.path()
        )));
    }
    limits.check_decoding(call.message_len())?;
    call.into_request()
}

/// The request of a client-streaming or bidirectional method: the call's head, and
/// its inbound messages decoded as `M`, each within the decoding limit.
///
/// # Errors
/// `INTERNAL` when the call carries no message stream (a unary call of a streaming
/// method: the transport did not route it as one).
pub fn streaming_request<M>(
    mut call: ServerCall,
    limits: MessageLimits,
) -> Result<Request<Streaming<M>>, Status> {
    let inbound = call.take_inbound().ok_or_else(|| {
        Status::internal(format!(
            "{} is a streaming method, but the call carries no message stream",
            call.path()
        ))
    })?;
    // The head only: a streaming call's body is empty, and `()` decodes from anything.
    let head = call.into_request::<()>()?;
    Ok(head.map(|()| Streaming::new(inbound, limits.decoding, Side::Server)))
}

/// The request of a server-streaming method: the first message the client streams.
///
/// # Errors
/// `INVALID_ARGUMENT` when the client's stream ends with no message, or its message
/// does not decode; `RESOURCE_EXHAUSTED` over the decoding limit; the status that
/// ended the client's stream (a cancel, a deadline).
pub async fn unary_request<M: Message + Default>(
    call: ServerCall,
    limits: MessageLimits,
) -> Result<Request<M>, Status> {
    let path = call.path().to_owned();
    let mut request = streaming_request::<M>(call, limits)?;
    let message = request
        .get_mut()
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument(format!("{path}: missing request message")))?;
    // The rest of the client's stream (normally just its end) is not awaited: the
    // handler starts now, and dropping the stream discards whatever else comes.
    Ok(request.map(|_| message))
}

/// The reply of a server-streaming or bidirectional method: `response`'s messages,
/// each within the encoding limit, and the call ended by its end (OK) or its first
/// `Err` item (that status).
pub fn streaming_reply<S, M>(response: Response<S>, limits: MessageLimits) -> ServerReply
where
    S: Stream<Item = Result<M, Status>> + Send + 'static,
    M: Message + Send + 'static,
{
    response.map(|stream| {
        ReplyBody::Stream(Box::pin(MessageStreamSource::new(stream, limits.encoding)))
    })
}
