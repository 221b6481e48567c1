//! Whose deadline applies: as tonic, the smaller of the channel's timeout
//! (`Endpoint::timeout`) and the request's own (`Request::set_timeout`).

use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::{Code, Request};
use tests::{path, serve_echo, Echo};

async fn slow_call(ch: Channel, request_timeout: Duration) -> (Code, Duration) {
    let mut g = Grpc::new(ch);
    let mut req = Request::new(Echo {
        id: 5_000, // the handler sleeps 5 s
        data: vec![],
    });
    req.set_timeout(request_timeout);
    let t0 = Instant::now();
    let e = g.unary::<Echo, Echo>(req, path("Sleep")).await.unwrap_err();
    (e.code(), t0.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_smaller_of_channel_and_request_timeouts_applies() {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, server) = serve_echo(
        Server::builder().shutdown_grace_period(Duration::ZERO),
        async {
            let _ = stopped.await;
        },
    )
    .await;
    let uri = format!("rdma://{addr}");
    let short_channel = Endpoint::from_shared(uri.clone())
        .unwrap()
        .timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let (code, took) = slow_call(short_channel, Duration::from_secs(10)).await;
    assert_eq!(code, Code::DeadlineExceeded);
    assert!(took < Duration::from_secs(2), "channel's 200 ms: {took:?}");

    let long_channel = Endpoint::from_shared(uri)
        .unwrap()
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let (code, took) = slow_call(long_channel, Duration::from_millis(200)).await;
    assert_eq!(code, Code::DeadlineExceeded);
    assert!(took < Duration::from_secs(2), "request's 200 ms: {took:?}");
    let _ = stop.send(());
    server.await.unwrap();
}
