//! The `grpc.reflection.v1alpha.ServerReflection` service, for older clients. Its
//! messages are v1's field for field (v1 is v1alpha renamed), so a request is
//! re-read as v1, answered as v1, and the answer re-read as v1alpha.

use std::sync::Arc;

use prost::Message;
use rpc_core::{Request, Response, Status, Streaming};

use super::state::ReflectionServiceState;
pub use crate::pb::v1alpha::server_reflection_server::{ServerReflection, ServerReflectionServer};
use crate::pb::v1alpha::{ServerReflectionRequest, ServerReflectionResponse};

/// The answers of one v1alpha `ServerReflectionInfo` call.
pub type ServerReflectionInfoStream =
    super::answer::ServerReflectionInfoStream<ServerReflectionRequest, ServerReflectionResponse>;

/// The v1alpha reflection service
/// [`Builder::build_v1alpha`](super::Builder::build_v1alpha) serves.
#[derive(Debug)]
pub struct ReflectionService {
    state: Arc<ReflectionServiceState>,
}

impl ReflectionService {
    pub(super) fn new(state: ReflectionServiceState) -> Self {
        ReflectionService {
            state: Arc::new(state),
        }
    }
}

fn answer(
    state: &ReflectionServiceState,
    request: ServerReflectionRequest,
) -> ServerReflectionResponse {
    let request = same_fields(&request);
    same_fields(&super::answer::answer(state, request))
}

/// `from` read as `To`: the two versions' messages share every field number and type,
/// so this loses nothing.
fn same_fields<From: Message, To: Message + Default>(from: &From) -> To {
    To::decode(from.encode_to_vec().as_slice())
        .expect("v1 and v1alpha reflection messages have the same fields")
}

#[rpc_core::async_trait]
impl ServerReflection for ReflectionService {
    type ServerReflectionInfoStream = ServerReflectionInfoStream;

    async fn server_reflection_info(
        &self,
        request: Request<Streaming<ServerReflectionRequest>>,
    ) -> Result<Response<ServerReflectionInfoStream>, Status> {
        Ok(Response::new(ServerReflectionInfoStream::new(
            request.into_inner(),
            Arc::clone(&self.state),
            answer,
        )))
    }
}
