//! The `grpc.reflection.v1.ServerReflection` service.

use std::sync::Arc;

use rpc_core::{Request, Response, Status, Streaming};

use super::answer::answer;
use super::state::ReflectionServiceState;
pub use crate::pb::v1::server_reflection_server::{ServerReflection, ServerReflectionServer};
use crate::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

/// The answers of one v1 `ServerReflectionInfo` call.
pub type ServerReflectionInfoStream =
    super::answer::ServerReflectionInfoStream<ServerReflectionRequest, ServerReflectionResponse>;

/// The v1 reflection service [`Builder::build_v1`](super::Builder::build_v1) serves.
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
