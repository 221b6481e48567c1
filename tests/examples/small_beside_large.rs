//! Small-call latency beside 64 MiB transfers (issue 15, "Fairness"), in one run:
//! 32 B echo calls, one in flight, alone and then while 64 MiB echo calls run
//! without pause on two other connections to the same server (two on one, one on
//! the other), on the quiet connection and on one that carries large calls.
//!
//! `cargo run -p tests --release --example small_beside_large [SMALL_CALLS]` (200 by
//! default: on a connection carrying large calls a small one may take hundreds of
//! milliseconds, which the client's connection still causes).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::Request;
use tests::{path, serve_echo, Echo};

const LARGE: usize = 64 << 20;

async fn echo(ch: &Channel, id: u64, data: Vec<u8>) -> Echo {
    let mut g = Grpc::new(ch.clone());
    g.unary::<Echo, Echo>(Request::new(Echo { id, data }), path("Echo"))
        .await
        .expect("echo")
        .into_inner()
}

async fn connect(uri: &str) -> Channel {
    Endpoint::from_shared(uri.to_string())
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

/// `n` small calls one after another on `ch`: their latencies, sorted.
async fn small_calls(ch: &Channel, n: usize) -> Vec<Duration> {
    let mut t = Vec::with_capacity(n);
    for k in 0..n {
        let t0 = Instant::now();
        echo(ch, k as u64, vec![7; 32]).await;
        t.push(t0.elapsed());
    }
    t.sort();
    t
}

fn line(what: &str, t: &[Duration]) {
    let q = |p: f64| t[((t.len() - 1) as f64 * p) as usize];
    println!(
        "{what:<44} p50 {:>10.1?}  p99 {:>10.1?}  max {:>10.1?}  ({} calls)",
        q(0.50),
        q(0.99),
        t[t.len() - 1],
        t.len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(200, |s| s.parse().expect("SMALL_CALLS"));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, server) = serve_echo(Server::builder(), async move {
        let _ = stop_rx.await;
    })
    .await;
    let uri = format!("rdma://{addr}");
    let (a, b, quiet) = (
        connect(&uri).await,
        connect(&uri).await,
        connect(&uri).await,
    );
    // Warm-up: connections proven, pools registered once.
    small_calls(&quiet, 200).await;
    small_calls(&a, 200).await;
    echo(&a, 0, vec![0; LARGE]).await;
    line("alone, quiet connection", &small_calls(&quiet, n).await);
    line("alone, connection a", &small_calls(&a, n).await);

    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut large = Vec::new();
    for ch in [a.clone(), a.clone(), b.clone()] {
        let (stop, bytes) = (stop.clone(), bytes.clone());
        large.push(tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                let r = echo(&ch, 1, vec![0; LARGE]).await;
                assert_eq!(r.data.len(), LARGE);
                bytes.fetch_add(2 * LARGE as u64, Ordering::Relaxed);
            }
        }));
    }
    let t0 = Instant::now();
    let (quiet_t, a_t) = tokio::join!(small_calls(&quiet, n), small_calls(&a, n));
    let secs = t0.elapsed().as_secs_f64();
    let moved = bytes.load(Ordering::Relaxed);
    stop.store(true, Ordering::Release);
    for t in large {
        t.await.expect("large calls");
    }
    line("beside 3 x 64 MiB echo, quiet connection", &quiet_t);
    line("beside 3 x 64 MiB echo, connection a", &a_t);
    println!(
        "large calls meanwhile: {:.0} MB/s both directions ({} MiB in {secs:.2} s)",
        moved as f64 / secs / 1e6,
        moved >> 20
    );
    let _ = stop_tx.send(());
    server.await.expect("server stops");
}
