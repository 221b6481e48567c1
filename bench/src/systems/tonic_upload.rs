//! tonic's one-way workload (on TCP or a Unix socket): the same service as
//! rdma-rpc's, with tonic's message limits raised to `MAX_MESSAGE` as for the echo.

use bytes::Bytes;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::MAX_MESSAGE;
use crate::proto::tonic_upload::upload_client::UploadClient;
use crate::proto::tonic_upload::upload_server::{Upload, UploadServer};
use crate::proto::tonic_upload::{Data, Received};

/// A clone of the cell's upload client: all share one HTTP/2 connection.
pub(crate) struct Caller(UploadClient<Channel>);

impl Caller {
    /// `concurrency` callers over `channel`.
    pub(crate) fn all(channel: Channel, concurrency: usize) -> Vec<Caller> {
        let client = UploadClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
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

#[tonic::async_trait]
impl Upload for Service {
    async fn put(&self, req: Request<Data>) -> Result<Response<Received>, Status> {
        Ok(Response::new(Received {
            bytes: req.get_ref().payload.len() as u64,
        }))
    }
}

pub(crate) fn server() -> UploadServer<Service> {
    UploadServer::new(Service)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE)
}
