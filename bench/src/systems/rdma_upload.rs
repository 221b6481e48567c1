//! rdma-rpc's one-way workload: a caller whose call carries the payload and gets
//! back only its length, and the server side of it.

use bytes::Bytes;
use rpc_core::transport::Channel;
use rpc_core::{Request, Response, Status};

use crate::proto::rdma_upload::upload_client::UploadClient;
use crate::proto::rdma_upload::upload_server::{Upload, UploadServer};
use crate::proto::rdma_upload::{Data, Received};

/// A clone of the cell's upload client: all share one connection.
pub(crate) struct Caller(UploadClient<Channel>);

impl Caller {
    /// `concurrency` callers over `channel`.
    pub(crate) fn all(channel: Channel, concurrency: usize) -> Vec<Caller> {
        let client = UploadClient::new(channel);
        (0..concurrency).map(|_| Caller(client.clone())).collect()
    }

    /// One upload of `payload`: the byte count the server says it received.
    pub(crate) async fn call(&mut self, payload: &Bytes) -> Result<usize, String> {
        let data = Data {
            payload: payload.clone(),
        };
        let reply = self.0.put(data).await.map_err(|s| s.to_string())?;
        Ok(reply.into_inner().bytes as usize)
    }
}

/// Counts what it is sent.
pub(crate) struct Service;

#[rpc_core::async_trait]
impl Upload for Service {
    async fn put(&self, req: Request<Data>) -> Result<Response<Received>, Status> {
        Ok(Response::new(Received {
            bytes: req.get_ref().payload.len() as u64,
        }))
    }
}

pub(crate) fn server() -> UploadServer<Service> {
    UploadServer::new(Service)
}
