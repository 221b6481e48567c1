//! Rough figures, not a benchmark suite: run with
//! `cargo test -p tests --release --test perf -- --ignored --nocapture`.

use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, CompletionMode, Endpoint, Server};
use rpc_core::Request;
use tests::{path, serve_echo, Echo};

async fn call(ch: &Channel, id: u64, data: Vec<u8>) -> Echo {
    Grpc::new(ch.clone())
        .unary::<Echo, Echo>(Request::new(Echo { id, data }), path("Echo"))
        .await
        .unwrap()
        .into_inner()
}

async fn run(mode: CompletionMode) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, _t) = serve_echo(Server::builder().completion_mode(mode), async move {
        let _ = rx.await;
    })
    .await;
    let ch = Endpoint::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .completion_mode(mode)
        .connect()
        .await
        .unwrap();

    // One call at a time, 32-byte payload.
    let n = 20_000;
    let mut lat = Vec::with_capacity(n);
    let t0 = Instant::now();
    for i in 0..n as u64 {
        let t = Instant::now();
        call(&ch, i, vec![7; 32]).await;
        lat.push(t.elapsed());
    }
    let total = t0.elapsed();
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "{mode:?}: 1 in flight: {:.0} calls/s, p50 {:?}, p99 {:?}",
        n as f64 / total.as_secs_f64(),
        pct(0.50),
        pct(0.99)
    );

    // 256 in flight.
    let n = 100_000u64;
    let workers = 256;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let ch = ch.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..n / workers {
                call(&ch, w * n + i, vec![7; 32]).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    println!(
        "{mode:?}: 256 in flight: {:.0} calls/s",
        n as f64 / t0.elapsed().as_secs_f64()
    );

    // One 64 MiB echo (request and response).
    let data = vec![3u8; 64 << 20];
    let t0 = Instant::now();
    let r = call(&ch, 1, data).await;
    let d = t0.elapsed();
    assert_eq!(r.data.len(), 64 << 20);
    println!(
        "{mode:?}: 64 MiB echo in {d:?} ({:.0} MiB/s each way)",
        64.0 / d.as_secs_f64()
    );
    drop(tx);
}

#[ignore = "figures, not a test: run in release with --ignored --nocapture"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures() {
    for mode in [
        CompletionMode::Busy,
        CompletionMode::Adaptive(Duration::from_micros(200)),
        CompletionMode::default(),
        CompletionMode::Event,
    ] {
        run(mode).await;
    }
}
