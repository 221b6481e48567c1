//! Devices that differ (docs/fabrics.md): each side's device capabilities travel in
//! the handshake and the connection uses what both have. Soft devices with explicit
//! profiles stand in for an iWARP device (no immediate data, no UD) and an RC-only one,
//! whatever `RDMA_RPC_SOFT_PROFILE` says for the default device.

use std::net::SocketAddr;

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::{Code, Request, Status};
use rpc_transport::{Device, SoftConfig, SoftProfile};
use tests::{init_tracing, path, serve_echo, Echo};
use tokio::sync::oneshot;

fn soft(profile: SoftProfile) -> Device {
    Device::open_soft_with(SoftConfig::default(), profile).expect("soft device")
}

/// Serves the echo service on `dev` until the returned sender is used or dropped.
async fn serve_on(dev: &Device, builder: Server) -> (SocketAddr, oneshot::Sender<()>) {
    init_tracing();
    let (tx, rx) = oneshot::channel::<()>();
    let (addr, _task) = serve_echo(builder.rdma_device(dev.clone()), async move {
        let _ = rx.await;
    })
    .await;
    (addr, tx)
}

fn endpoint(scheme: &str, addr: SocketAddr, dev: &Device) -> Endpoint {
    Endpoint::from_shared(format!("{scheme}://{addr}"))
        .unwrap()
        .rdma_device(dev.clone())
}

async fn echo(ch: &Channel, id: u64, data: Vec<u8>) -> Result<Echo, Status> {
    let mut g = Grpc::new(ch.clone());
    Ok(
        g.unary::<Echo, Echo>(Request::new(Echo { id, data }), path("Echo"))
            .await?
            .into_inner(),
    )
}

/// Small calls, calls of exactly a frame's worth around the 4-byte header, and a
/// message fragmented over many frames all arrive whole.
async fn calls_arrive_whole(ch: &Channel) {
    for (id, len) in [
        (1u64, 0usize),
        (2, 32),
        (3, 8180),
        (4, 8188),
        (5, 8200),
        (6, 1 << 20),
    ] {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + id as usize) as u8).collect();
        let r = echo(ch, id, data.clone()).await.unwrap();
        assert_eq!((r.id, r.data.len()), (id, len));
        assert!(r.data == data, "call {id} of {len} bytes came back altered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_immediates_talks_to_a_server_without_in_header_mode() {
    let (sdev, cdev) = (soft(SoftProfile::IwarpLike), soft(SoftProfile::Full));
    let (addr, _stop) = serve_on(&sdev, Server::builder()).await;
    let ch = endpoint("rdma", addr, &cdev).connect().await.unwrap();
    // The server's device refuses every Send with Immediate: calls that come back
    // prove that both sides framed in the payload.
    calls_arrive_whole(&ch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_devices_without_immediates_talk_in_header_mode() {
    let (sdev, cdev) = (soft(SoftProfile::IwarpLike), soft(SoftProfile::IwarpLike));
    let (addr, _stop) = serve_on(&sdev, Server::builder()).await;
    let ch = endpoint("rdma", addr, &cdev).connect().await.unwrap();
    calls_arrive_whole(&ch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_immediates_refuses_a_client_without_naming_why() {
    let (sdev, cdev) = (soft(SoftProfile::Full), soft(SoftProfile::IwarpLike));
    let (addr, _stop) = serve_on(&sdev, Server::builder()).await;
    let e = endpoint("rdma", addr, &cdev).connect().await.unwrap_err();
    assert!(
        format!("{e:?}").contains("device has no immediate data"),
        "{e:?}"
    );
    // The server still serves clients that have them.
    let ch = endpoint("rdma", addr, &sdev).connect().await.unwrap();
    assert_eq!(echo(&ch, 9, vec![1; 64]).await.unwrap().id, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ud_to_a_server_without_ud_falls_back_to_rc() {
    let (sdev, cdev) = (soft(SoftProfile::RcOnly), soft(SoftProfile::Full));
    let (addr, _stop) = serve_on(&sdev, Server::builder()).await;
    let ch = endpoint("rdma+ud", addr, &cdev).connect().await.unwrap();
    assert_eq!(echo(&ch, 3, vec![2; 100]).await.unwrap().data, vec![2; 100]);
    assert!(
        ch.ud_stats().is_none(),
        "no UD session: the server has no UD"
    );
    // A clone made before any call shares the fallback.
    let lazy = endpoint("rdma+ud", addr, &cdev).connect_lazy();
    let clone = lazy.clone();
    assert_eq!(echo(&lazy, 4, vec![]).await.unwrap().id, 4);
    assert_eq!(echo(&clone, 5, vec![]).await.unwrap().id, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ud_to_a_server_without_ud_or_rc_fails_naming_both() {
    let (sdev, cdev) = (soft(SoftProfile::RcOnly), soft(SoftProfile::Full));
    let (addr, _stop) = serve_on(&sdev, Server::builder().accept_rc(false)).await;
    let e = endpoint("rdma+ud", addr, &cdev)
        .connect()
        .await
        .unwrap_err();
    let msg = format!("{e:?}");
    assert!(msg.contains("server's device has no UD"), "{msg}");
    assert!(msg.contains("does not accept RC connections"), "{msg}");
    let lazy = endpoint("rdma+ud", addr, &cdev).connect_lazy();
    let s = echo(&lazy, 1, vec![]).await.unwrap_err();
    assert_eq!(s.code(), Code::Unavailable, "{s}");
    assert!(s.message().contains("device has no UD"), "{s}");
}
