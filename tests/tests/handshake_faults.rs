//! Peers that connect and say nothing cost the server a bounded record for a
//! bounded time, and never hold back a client that speaks.

use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;
use tests::{path, serve_echo, Echo};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

async fn call_once(addr: std::net::SocketAddr) {
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let mut g = Grpc::new(ch);
    let r = g
        .unary::<Echo, Echo>(
            Request::new(Echo {
                id: 1,
                data: vec![],
            }),
            path("Echo"),
        )
        .await
        .unwrap();
    assert_eq!(r.into_inner().id, 1);
}

/// Waits until the server closes `s` (end of stream or a reset); panics after `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) {
    let mut b = [0u8; 16];
    match tokio::time::timeout(within, s.read(&mut b)).await {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(n)) => panic!("the server sent {n} bytes to a silent peer"),
        Err(_) => panic!("a silent connection was still open after {within:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_do_not_delay_a_client_and_close_at_the_handshake_timeout() {
    tests::init_tracing();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = Server::builder().handshake_timeout(Duration::from_secs(1));
    let (addr, task) = serve_echo(server, async {
        let _ = stopped.await;
    })
    .await;
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    let t0 = Instant::now();
    call_once(addr).await;
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    for s in &mut silent {
        closed_within(s, Duration::from_secs(10)).await;
    }
    let _ = stop.send(());
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_silent_connection_too_many_closes_the_oldest() {
    tests::init_tracing();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = Server::builder()
        .handshake_timeout(Duration::from_secs(600))
        .max_pending_handshakes(8);
    let (addr, task) = serve_echo(server, async {
        let _ = stopped.await;
    })
    .await;
    let mut oldest = TcpStream::connect(addr).await.unwrap();
    let mut rest = Vec::new();
    for _ in 0..8 {
        rest.push(TcpStream::connect(addr).await.unwrap());
    }
    // The ninth silent peer evicted the first, long before its timeout.
    closed_within(&mut oldest, Duration::from_secs(5)).await;
    // A client that speaks is served though eight silent ones wait.
    call_once(addr).await;
    let _ = stop.send(());
    task.await.unwrap();
}
