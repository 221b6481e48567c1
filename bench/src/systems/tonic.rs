//! tonic over HTTP/2 on TCP: the generated echo client over one `Channel`, and the
//! echo server. tonic's defaults apply except the message limits, raised to
//! `MAX_MESSAGE` both ways (its 4 MiB default would refuse the 4 MiB cells).

use std::future::Future;

use bytes::Bytes;
use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tonic::transport::server::{Connected, TcpIncoming};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};

use super::MAX_MESSAGE;
use crate::proto::tonic::echo_client::EchoClient;
use crate::proto::tonic::echo_server::{Echo, EchoServer};
use crate::proto::tonic::{EchoRequest, EchoResponse};

/// A clone of the cell's client: all share one HTTP/2 connection, as a user's would.
pub(crate) struct Caller(EchoClient<Channel>);

impl Caller {
    pub(crate) async fn call(&mut self, payload: &Bytes) -> Result<usize, String> {
        let req = EchoRequest {
            payload: payload.clone(),
        };
        let reply = self.0.unary_echo(req).await.map_err(|s| s.to_string())?;
        Ok(reply.into_inner().payload.len())
    }
}

pub(crate) async fn connect(url: &str, concurrency: usize) -> Result<Vec<Caller>, String> {
    Ok(callers(channel(url).await?, concurrency))
}

/// `concurrency` clones of one client on `channel`.
pub(super) fn callers(channel: Channel, concurrency: usize) -> Vec<Caller> {
    let client = EchoClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    (0..concurrency).map(|_| Caller(client.clone())).collect()
}

/// One HTTP/2 connection to `url`.
pub(crate) async fn channel(url: &str) -> Result<Channel, String> {
    Endpoint::from_shared(url.to_string())
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("{e}: {:?}", std::error::Error::source(&e)))
}

/// Returns the request's payload (a reference-counted `Bytes`, not a copy).
struct EchoService;

#[tonic::async_trait]
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

pub(crate) async fn serve(
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    // `Server::serve` sets TCP_NODELAY on accepted connections; do the same here.
    serve_incoming(TcpIncoming::from(listener).with_nodelay(Some(true)), stop).await
}

/// The echo server (unary and streaming) and the upload server on any stream of
/// accepted connections: TCP here, a Unix socket for `tonic-uds`.
pub(super) async fn serve_incoming<I, IO, IE>(
    incoming: I,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String>
where
    I: Stream<Item = Result<IO, IE>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let svc = EchoServer::new(EchoService)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    Server::builder()
        .add_service(svc)
        .add_service(super::tonic_stream::server())
        .add_service(super::tonic_upload::server())
        .serve_with_incoming_shutdown(incoming, stop)
        .await
        .map_err(|e| e.to_string())
}
