//! tonic's `TcpIncoming` serves as tonic's does: bound, handed to
//! `serve_with_incoming_shutdown`, and its clients are answered.

use rpc_core::client::Grpc;
use rpc_core::transport::server::TcpIncoming;
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;
use tests::{path, Echo, EchoService};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_tcp_incoming_answers_calls() {
    tests::init_tracing();
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
        .unwrap()
        .with_nodelay(Some(true));
    let addr = incoming.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        Server::builder()
            .add_service(EchoService)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            }),
    );
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let reply = Grpc::new(ch)
        .unary::<Echo, Echo>(
            Request::new(Echo {
                id: 42,
                data: vec![1, 2, 3],
            }),
            path("Echo"),
        )
        .await
        .unwrap();
    assert_eq!(reply.into_inner().id, 42);
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
