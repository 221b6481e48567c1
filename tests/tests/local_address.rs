//! `Endpoint::local_address`, as tonic's: the handshake connection leaves from that
//! address (and the default soft device serves the RDMA connection there), or the
//! connect fails saying why.

use std::net::IpAddr;

use rpc_core::client::Grpc;
use rpc_core::transport::{Endpoint, Server};
use rpc_core::Request;
use tests::{path, Echo, EchoService};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_leave_from_the_local_address_or_the_connect_says_it_cannot() {
    let (addr, _stop) = tests::serve_router(Server::builder().add_service(EchoService)).await;
    let endpoint = Endpoint::from_shared(format!("rdma://{addr}")).unwrap();

    let here = IpAddr::from([127, 0, 0, 1]);
    let ch = endpoint
        .clone()
        .local_address(Some(here))
        .connect()
        .await
        .unwrap();
    let reply = Grpc::new(ch)
        .unary::<Echo, Echo>(
            Request::new(Echo {
                id: 9,
                data: vec![],
            }),
            path("Echo"),
        )
        .await
        .unwrap();
    assert_eq!(reply.into_inner().id, 9);

    // An address this host does not have (TEST-NET-1): the bind fails, nothing is sent.
    let elsewhere = IpAddr::from([192, 0, 2, 55]);
    let e = endpoint
        .local_address(Some(elsewhere))
        .connect()
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "transport error");
    let why = format!("{e:?}");
    assert!(why.contains("Cannot assign requested address"), "{why}");
}
