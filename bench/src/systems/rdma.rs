//! rdma-rpc: the generated echo client over one `Channel`, and the echo server.

use std::future::Future;

use bytes::Bytes;
use rpc_core::transport::{Endpoint, Server};
use rpc_core::{Request, Response, Status};
use tokio::net::TcpListener;

use crate::proto::rdma::echo_client::EchoClient;
use crate::proto::rdma::echo_server::{Echo, EchoServer};
use crate::proto::rdma::{EchoRequest, EchoResponse};
use crate::provider::Provider;

/// A clone of the cell's client: all share one connection, as a user's would.
pub(crate) struct Caller(EchoClient<rpc_core::transport::Channel>);

impl Caller {
    pub(crate) async fn call(&mut self, payload: &Bytes) -> Result<usize, String> {
        let req = EchoRequest {
            payload: payload.clone(),
        };
        let reply = self.0.unary_echo(req).await.map_err(|s| s.to_string())?;
        Ok(reply.into_inner().payload.len())
    }
}

/// `concurrency` callers over one channel; `tcp_link`: the soft provider's link
/// forced to TCP (`rdma-rpc-tcp`).
pub(crate) async fn connect(
    url: &str,
    concurrency: usize,
    provider: &Provider,
    tcp_link: bool,
) -> Result<Vec<Caller>, String> {
    let client = EchoClient::new(channel(url, provider, tcp_link).await?);
    Ok((0..concurrency).map(|_| Caller(client.clone())).collect())
}

/// One connection to `url` with the run's provider settings.
pub(crate) async fn channel(
    url: &str,
    provider: &Provider,
    tcp_link: bool,
) -> Result<rpc_core::transport::Channel, String> {
    let ep = Endpoint::from_shared(url).map_err(|e| e.to_string())?;
    let ep = match crate::link::client_device(provider, tcp_link)? {
        Some(dev) => ep.rdma_device(dev),
        None => ep.device(provider.device()),
    };
    ep.completion_mode(provider.completion())
        .initial_stream_window_size(provider.stream_window())
        .connect()
        .await
        .map_err(|e| e.to_string())
}

/// Returns the request's payload (a reference-counted `Bytes`, not a copy).
struct EchoService;

#[rpc_core::async_trait]
impl Echo for EchoService {
    async fn unary_echo(
        &self,
        req: Request<EchoRequest>,
    ) -> Result<Response<EchoResponse>, Status> {
        Ok(Response::new(EchoResponse {
            payload: req.into_inner().payload,
        }))
    }
}

/// Serves the echo (unary and streaming) and the upload; `tcp_link`: on a soft
/// device whose same-host link is forced to TCP (`rdma-rpc-tcp`).
pub(crate) async fn serve(
    listener: TcpListener,
    provider: &Provider,
    tcp_link: bool,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let builder = if tcp_link {
        Server::builder().rdma_device(crate::link::tcp_link_device(provider)?)
    } else {
        Server::builder().device(provider.device())
    };
    builder
        .completion_mode(provider.completion())
        .initial_stream_window_size(provider.stream_window())
        .add_service(EchoServer::new(EchoService))
        .add_service(super::rdma_stream::server())
        .add_service(super::rdma_upload::server())
        .serve_with_listener(listener, stop)
        .await
        .map_err(|e| e.to_string())
}
