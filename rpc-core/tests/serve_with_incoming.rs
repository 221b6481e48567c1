//! `Router::serve_with_incoming`: a server fed a stream of handshake connections the
//! caller accepted (here: from a channel the test fills) serves their calls, and
//! drains and returns when the stream ends, as tonic's does.

use std::task::{Context, Poll};

use rpc_core::client::Grpc;
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Endpoint, Server};
use rpc_core::{Request, Response, Status};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone)]
struct Empty;

impl NamedService for Empty {
    const NAME: &'static str = "test.Empty";
}

impl tower::Service<ServerCall> for Empty {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        Box::pin(async move {
            call.into_request::<()>()?;
            Ok(Response::new(ReplyBody::message(())))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_connections_it_is_given_and_returns_when_they_end() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<TcpStream>>(4);
    let incoming = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let server = tokio::spawn(
        Server::builder()
            .add_service(Empty)
            .serve_with_incoming(incoming),
    );
    // The test accepts; the server only sees what it is handed.
    let accepting = tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            if tx.send(Ok(tcp)).await.is_err() {
                return;
            }
        }
    });

    let channel = Endpoint::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("the handshake went through the stream");
    let mut grpc = Grpc::new(channel);
    for _ in 0..3 {
        grpc.unary::<(), ()>(Request::new(()), "/test.Empty/Call")
            .await
            .expect("a call over a streamed connection");
    }
    drop(grpc);

    // The stream ends: the server drains and returns.
    accepting.abort();
    let _ = accepting.await;
    server
        .await
        .unwrap()
        .expect("the server returns Ok when its stream ends");
}
