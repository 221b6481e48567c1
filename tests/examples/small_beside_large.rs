//! Small-call latency beside 64 MiB transfers (issue 15, "Fairness"), in one run:
//! 32 B echo calls, one in flight per connection, alone and then while 64 MiB echo
//! calls run on two other connections to the same server (two at a time on one, one
//! on the other), on the quiet connection and on one that carries large calls.
//!
//! The mixed window lasts until every large call has ended (`ROUNDS` 64 MiB echo
//! calls on each of the three large callers), so the small calls' figures cover the
//! whole transfer of several large bodies, not just its start. Two probes run in the
//! same window: a task on the runtime and an OS thread, each timing 1 ms waits.
//!
//! What a small call can wait for beside a 64 MiB transfer:
//! - the soft provider, per hop: one progress pass of each QP of its CQ that moves
//!   bulk data (at most 1 MiB written and 1 MiB read each), and on the bulk transfer's
//!   own QP one 64 KiB chunk plus what the link holds already (the 1 MiB shared-memory
//!   ring, or the TCP socket buffer). The `soft_mixed` example measures this alone;
//! - the client's connection lock: held only to post, never across the encoding of a
//!   body by reference (asserted exactly in `tests/large_fairness.rs`);
//! - a free runtime worker: while the application copies 64 MiB bodies (prost encode
//!   and decode, on both sides; here client and server share two workers) nothing else
//!   runs, and nothing in rdma-rpc bounds that. The runtime probe's line shows it.
//!
//! Measured on a 2-core machine shared with other jobs (load 10-13), 4 runs: p50
//! beside the transfers is 5-10 µs, p99 0.05-4 ms, and the maximum 145-570 ms, the
//! same order as the runtime probe's own maximum (134-315 ms) while the OS thread's
//! stays at 11-95 ms: the maximum is set by busy workers, not by the transport.
//!
//! `cargo run -p tests --release --example small_beside_large [SMALL_CALLS [ROUNDS]]`
//! (200 small calls alone, 3 rounds by default).

use std::sync::atomic::{AtomicBool, Ordering};
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
    small_calls_while(ch, n, &AtomicBool::new(false)).await
}

/// Small calls one after another on `ch`, at least `min` and on while `go` holds:
/// their latencies, sorted.
async fn small_calls_while(ch: &Channel, min: usize, go: &AtomicBool) -> Vec<Duration> {
    let mut t = Vec::with_capacity(min.max(1 << 12));
    while t.len() < min || go.load(Ordering::Acquire) {
        let t0 = Instant::now();
        echo(ch, t.len() as u64, vec![7; 32]).await;
        t.push(t0.elapsed());
    }
    t.sort();
    t
}

/// How late a task on the runtime wakes from 1 ms timers while `go` holds, sorted: a
/// small call can be no faster than the runtime's next free moment, and with both
/// workers busy copying a 64 MiB body (the application's encode and decode, on either
/// side) nothing else runs. This tells that wait apart from the transport's.
async fn runtime_probe(go: Arc<AtomicBool>) -> Vec<Duration> {
    let mut late = Vec::with_capacity(1 << 12);
    while go.load(Ordering::Acquire) {
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
        late.push(t0.elapsed().saturating_sub(Duration::from_millis(1)));
    }
    late.sort();
    late
}

/// The same for an OS thread outside the runtime: how much the machine itself (shared
/// with other jobs) holds this process's threads back.
fn thread_probe(go: &AtomicBool) -> Vec<Duration> {
    let mut late = Vec::with_capacity(1 << 12);
    while go.load(Ordering::Acquire) {
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_millis(1));
        late.push(t0.elapsed().saturating_sub(Duration::from_millis(1)));
    }
    late.sort();
    late
}

fn line(what: &str, t: &[Duration]) {
    line_of(what, t, "calls");
}

fn line_of(what: &str, t: &[Duration], unit: &str) {
    let q = |p: f64| t[((t.len() - 1) as f64 * p) as usize];
    println!(
        "{what:<44} p50 {:>9.1?}  p99 {:>9.1?}  p99.9 {:>9.1?}  max {:>9.1?}  ({} {unit})",
        q(0.50),
        q(0.99),
        q(0.999),
        t[t.len() - 1],
        t.len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(200, |s| s.parse().expect("SMALL_CALLS"));
    let rounds: usize = args.next().map_or(3, |s| s.parse().expect("ROUNDS"));
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

    let go = Arc::new(AtomicBool::new(true));
    let t0 = Instant::now();
    let large: Vec<_> = [a.clone(), a.clone(), b.clone()]
        .into_iter()
        .map(|ch| {
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let r = echo(&ch, 1, vec![0; LARGE]).await;
                    assert_eq!(r.data.len(), LARGE);
                }
            })
        })
        .collect();
    let probes = (
        tokio::spawn(runtime_probe(go.clone())),
        std::thread::spawn({
            let go = go.clone();
            move || thread_probe(&go)
        }),
    );
    let small: Vec<_> = [quiet.clone(), a.clone()]
        .into_iter()
        .map(|ch| {
            let go = go.clone();
            // At least one call each, then on until the last large call ends.
            tokio::spawn(async move { small_calls_while(&ch, 1, &go).await })
        })
        .collect();
    for t in large {
        t.await.expect("large calls");
    }
    let secs = t0.elapsed().as_secs_f64();
    go.store(false, Ordering::Release);
    let mut lat = Vec::new();
    for t in small {
        lat.push(t.await.expect("small calls"));
    }
    line("beside 3 x 64 MiB echo, quiet connection", &lat[0]);
    line("beside 3 x 64 MiB echo, connection a", &lat[1]);
    line_of(
        "  meanwhile: runtime task's 1 ms timer, late",
        &probes.0.await.expect("runtime probe"),
        "timers",
    );
    line_of(
        "  meanwhile: OS thread's 1 ms sleep, late",
        &probes.1.join().expect("thread probe"),
        "sleeps",
    );
    let moved = 3 * rounds * 2 * LARGE;
    println!(
        "large calls meanwhile: {} x 64 MiB echo, {:.0} MB/s both directions ({} MiB in \
         {secs:.2} s)",
        3 * rounds,
        moved as f64 / secs / 1e6,
        moved >> 20
    );
    let _ = stop_tx.send(());
    server.await.expect("server stops");
}
