//! One reflection request answered (in `grpc.reflection.v1` terms; v1alpha is the
//! same messages under another package), and the stream of answers to a call's
//! requests.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_util::Stream;
use prost::Message;
use rpc_core::{Code, Status, Streaming};

use super::state::ReflectionServiceState;
use crate::pb::v1::server_reflection_request::MessageRequest;
use crate::pb::v1::server_reflection_response::MessageResponse;
use crate::pb::v1::{
    ErrorResponse, ExtensionNumberResponse, FileDescriptorResponse, ListServiceResponse,
    ServerReflectionRequest, ServerReflectionResponse, ServiceResponse,
};

/// The answer to `request`. A symbol or file the service does not know is an
/// `ErrorResponse` in the stream (as the gRPC reflection protocol has it), so the
/// call stays open for the client's next request.
pub(crate) fn answer(
    state: &ReflectionServiceState,
    request: ServerReflectionRequest,
) -> ServerReflectionResponse {
    let files = |found: Option<Vec<Vec<u8>>>, what: String| match found {
        Some(file_descriptor_proto) => {
            MessageResponse::FileDescriptorResponse(FileDescriptorResponse {
                file_descriptor_proto,
            })
        }
        None => error(Code::NotFound, format!("{what} not found")),
    };
    let response = match &request.message_request {
        None => error(Code::InvalidArgument, "the request asks nothing".into()),
        Some(MessageRequest::ListServices(_)) => {
            MessageResponse::ListServicesResponse(ListServiceResponse {
                service: state
                    .list_services()
                    .iter()
                    .map(|name| ServiceResponse { name: name.clone() })
                    .collect(),
            })
        }
        Some(MessageRequest::FileByFilename(name)) => {
            files(state.file_by_filename(name), format!("file {name:?}"))
        }
        Some(MessageRequest::FileContainingSymbol(symbol)) => files(
            state.file_containing_symbol(symbol),
            format!("symbol {symbol:?}"),
        ),
        Some(MessageRequest::FileContainingExtension(_)) => {
            error(Code::NotFound, "extensions are not supported".into())
        }
        // Empty rather than an error: some clients (grpcurl) stop on an error here.
        Some(MessageRequest::AllExtensionNumbersOfType(request)) => {
            MessageResponse::AllExtensionNumbersResponse(ExtensionNumberResponse {
                base_type_name: request.clone(),
                extension_number: Vec::new(),
            })
        }
    };
    ServerReflectionResponse {
        valid_host: request.host.clone(),
        original_request: Some(request),
        message_response: Some(response),
    }
}

fn error(code: Code, message: String) -> MessageResponse {
    MessageResponse::ErrorResponse(ErrorResponse {
        error_code: code as i32,
        error_message: message,
    })
}

/// The answers to a `ServerReflectionInfo` call's requests, one per request, in
/// order, computed as the client reads them (no task, no queue). Ends when the
/// client's requests end; a client stream that fails ends it with that status.
pub struct ServerReflectionInfoStream<Req, Resp> {
    requests: Streaming<Req>,
    state: Arc<ReflectionServiceState>,
    answer: fn(&ReflectionServiceState, Req) -> Resp,
}

impl<Req, Resp> ServerReflectionInfoStream<Req, Resp> {
    pub(crate) fn new(
        requests: Streaming<Req>,
        state: Arc<ReflectionServiceState>,
        answer: fn(&ReflectionServiceState, Req) -> Resp,
    ) -> Self {
        ServerReflectionInfoStream {
            requests,
            state,
            answer,
        }
    }
}

impl<Req, Resp> Stream for ServerReflectionInfoStream<Req, Resp>
where
    Req: Message + Default,
{
    type Item = Result<Resp, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let request = ready!(Pin::new(&mut this.requests).poll_next(cx));
        Poll::Ready(request.map(|request| request.map(|r| (this.answer)(&this.state, r))))
    }
}

impl<Req, Resp> std::fmt::Debug for ServerReflectionInfoStream<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ServerReflectionInfoStream").finish()
    }
}
