//! UD transport end to end over the soft provider (UD over UDP with fault injection):
//! at-most-once execution under loss and duplication, bounded per-session state with
//! 1,000 clients, the RC fallback and the payload limit, deadlines, a lost server.
//! On a device without UD (`RDMA_RPC_SOFT_PROFILE=iwarp_like` or `rc_only`) each
//! test asserts instead that `rdma+ud://` falls back to RC, or fails naming the
//! missing UD against a server that takes no RC (`has_ud_or_falls_back`).
//!
//! Tests without fault injection run on the default device (rxe0 in the SoftRoCE VM,
//! where this binary is staged as `e2e-ud`; soft elsewhere) or the one
//! `RDMA_RPC_TEST_DEVICE` names; fault injection exists only on soft, so the tests
//! that inject faults open soft devices whatever the build.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rpc_core::client::Grpc;
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Channel, Endpoint, Server, UdStatsHandle};
use rpc_core::{Code, Request, Response, Status};
use rpc_transport::{Device, SoftConfig, UdFaults};
use tests::{init_tracing, Echo};
use tokio::sync::oneshot;

const ECHO: &str = "/ud.Count/Echo";
const BIG: &str = "/ud.Count/Big";
const SLEEP: &str = "/ud.Count/Sleep";

/// Echoes, counting executions per request id; `Big` replies with `id` bytes,
/// `Sleep` echoes after `data.len()` × 100 ms.
#[derive(Clone)]
struct Count(Arc<Vec<AtomicU32>>);

impl Count {
    fn new(n: usize) -> Count {
        Count(Arc::new((0..n).map(|_| AtomicU32::new(0)).collect()))
    }
    fn runs(&self, id: usize) -> u32 {
        self.0[id].load(Ordering::Relaxed)
    }
}

impl NamedService for Count {
    const NAME: &'static str = "ud.Count";
}

impl tower::Service<ServerCall> for Count {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        let counts = self.0.clone();
        Box::pin(async move {
            let method = call.method().to_string();
            let m = call.into_request::<Echo>()?.into_inner();
            if let Some(c) = counts.get(m.id as usize) {
                c.fetch_add(1, Ordering::Relaxed);
            }
            let reply = match method.as_str() {
                "Echo" => m,
                "Sleep" => {
                    tokio::time::sleep(Duration::from_millis(100) * m.data.len() as u32).await;
                    m
                }
                "Big" => Echo {
                    id: m.id,
                    data: vec![7; m.id as usize],
                },
                other => return Err(Status::unimplemented(other.to_string())),
            };
            Ok(Response::new(ReplyBody::message(reply)))
        })
    }
}

/// The device to test on: `RDMA_RPC_TEST_DEVICE`, else the default one.
fn device() -> Device {
    match std::env::var("RDMA_RPC_TEST_DEVICE") {
        Ok(name) => Device::open(&name).expect("open RDMA_RPC_TEST_DEVICE"),
        Err(_) => Device::open_default().expect("default device"),
    }
}

/// A soft device, for fault injection.
fn soft() -> Device {
    Device::open_soft(SoftConfig::default()).expect("soft device")
}

struct Served {
    addr: SocketAddr,
    stats: UdStatsHandle,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    fn ud(&self, dev: &Device) -> Endpoint {
        Endpoint::from_shared(format!("rdma+ud://{}", self.addr))
            .unwrap()
            .rdma_device(dev.clone())
    }

    async fn shut_down(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap();
    }
}

async fn serve(builder: Server, dev: &Device, svc: Count) -> Served {
    init_tracing();
    let stats = UdStatsHandle::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let b = builder.rdma_device(dev.clone()).ud_stats(stats.clone());
    let task = tokio::spawn(async move {
        b.add_service(svc)
            .serve_with_listener(listener, async move {
                let _ = rx.await;
            })
            .await
            .expect("server runs");
    });
    Served {
        addr,
        stats,
        stop: Some(tx),
        task,
    }
}

async fn call(ch: &Channel, path: &'static str, id: u64, data: Vec<u8>) -> Result<Echo, Status> {
    let mut g = Grpc::new(ch.clone());
    Ok(g.unary::<Echo, Echo>(Request::new(Echo { id, data }), path)
        .await?
        .into_inner())
}

/// Polls `cond` every 10 ms for up to 30 s (a condition, not a guess at timing).
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what} did not happen within 30 s");
}

/// Whether `dev` has UD. When it does not (the soft `iwarp_like` and `rc_only`
/// profiles, iWARP, RC-only devices), this has asserted what a UD channel does there
/// instead, and the caller's test is done: it connects over RC (calls run once, no UD
/// session), and against a server that takes no RC it fails at once, eagerly or on
/// the first call of a lazy channel, naming the missing UD.
async fn has_ud_or_falls_back(dev: &Device) -> bool {
    if dev.caps().ud {
        return true;
    }
    let count = Count::new(2);
    let srv = serve(Server::builder(), dev, count.clone()).await;
    let ch = srv
        .ud(dev)
        .connect()
        .await
        .expect("rdma+ud:// connects over RC");
    assert_eq!(
        call(&ch, ECHO, 1, vec![5; 100]).await.unwrap().data,
        vec![5; 100]
    );
    assert_eq!(count.runs(1), 1);
    assert!(
        ch.ud_stats().is_none(),
        "a UD session on a device without UD"
    );
    drop(ch);
    srv.shut_down().await;

    let srv = serve(Server::builder().accept_rc(false), dev, Count::new(1)).await;
    let e = srv.ud(dev).connect().await.expect_err("no UD and no RC");
    assert!(format!("{e:?}").contains("device has no UD"), "{e:?}");
    let lazy = srv.ud(dev).connect_lazy();
    let s = call(&lazy, ECHO, 0, vec![])
        .await
        .expect_err("no UD and no RC");
    assert_eq!(s.code(), Code::Unavailable, "{s}");
    assert!(s.message().contains("device has no UD"), "{s}");
    srv.shut_down().await;
    eprintln!(
        "note: device {} has no UD: asserted the RC fallback and its refusal instead",
        dev.name()
    );
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_calls_at_5_percent_loss_and_1_percent_duplication_execute_exactly_once() {
    const N: usize = 100_000;
    let (sdev, cdev) = (soft(), soft());
    if !has_ud_or_falls_back(&sdev).await {
        return;
    }
    for (d, seed) in [(&sdev, 1), (&cdev, 2)] {
        d.set_ud_faults(UdFaults {
            loss: 0.05,
            duplicate: 0.01,
            reorder: 0.0,
            seed,
        })
        .unwrap();
    }
    let count = Count::new(N);
    let srv = serve(Server::builder(), &sdev, count.clone()).await;
    let started = std::time::Instant::now();
    let (channels, workers) = (4usize, 256usize);
    let mut chans = Vec::new();
    for _ in 0..channels {
        chans.push(srv.ud(&cdev).ud_window(64).connect().await.unwrap());
    }
    let mut tasks = Vec::new();
    for w in 0..workers {
        let ch = chans[w % channels].clone();
        tasks.push(tokio::spawn(async move {
            let mut id = w;
            while id < N {
                let data = (id as u64).to_be_bytes().repeat(id % 8);
                let r = call(&ch, ECHO, id as u64, data.clone()).await.unwrap();
                assert_eq!((r.id, r.data), (id as u64, data));
                id += workers;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let mut retx = 0;
    let mut dup_replies = 0;
    for ch in &chans {
        let s = ch.ud_stats().unwrap();
        retx += s.retransmissions;
        dup_replies += s.duplicate_replies;
    }
    let s = srv.stats.get().unwrap();
    let once = (0..N).filter(|&i| count.runs(i) == 1).count();
    println!(
        "{N} UD calls at 5% loss, 1% duplication: {elapsed:?}, {retx} retransmissions, \
         {dup_replies} duplicate replies dropped; server {s:?}; soft {:?} / {:?}",
        sdev.soft_stats(),
        cdev.soft_stats()
    );
    assert_eq!(once, N, "every call executed exactly once");
    assert_eq!(s.executed, N as u64);
    assert!(
        retx > 0 && s.duplicates_suppressed > 0,
        "faults were injected"
    );
    srv.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_requests_execute_once() {
    let (sdev, cdev) = (soft(), soft());
    if !has_ud_or_falls_back(&sdev).await {
        return;
    }
    cdev.set_ud_faults(UdFaults {
        duplicate: 1.0,
        seed: 3,
        ..UdFaults::default()
    })
    .unwrap();
    let count = Count::new(1000);
    let srv = serve(Server::builder(), &sdev, count.clone()).await;
    let ch = srv.ud(&cdev).connect().await.unwrap();
    for id in 0..1000u64 {
        assert_eq!(call(&ch, ECHO, id, vec![1; 10]).await.unwrap().id, id);
    }
    assert!(
        (0..1000).all(|i| count.runs(i) == 1),
        "a duplicate re-executed"
    );
    let s = srv.stats.get().unwrap();
    assert_eq!(s.executed, 1000);
    assert!(s.duplicates_suppressed >= 900, "{s:?}");
    srv.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_ud_clients_keep_the_servers_per_session_state_bounded() {
    const CLIENTS: usize = 1000;
    const WINDOW: u32 = 4;
    // Clients share 8 devices: on soft, every CQ with a UD QP watches its device's
    // one UDP socket, and Linux refuses (EINVAL) to nest one file under more than
    // 500 epoll sets that are themselves in an epoll set (tokio's).
    let sdev = device();
    if !has_ud_or_falls_back(&sdev).await {
        return;
    }
    let cdevs: Vec<Device> = (0..8).map(|_| device()).collect();
    let count = Count::new(CLIENTS * 4);
    let srv = serve(Server::builder().ud_window(WINDOW), &sdev, count.clone()).await;
    let mut chans = Vec::new();
    for i in 0..CLIENTS {
        let ep = srv.ud(&cdevs[i % cdevs.len()]).ud_window(WINDOW);
        chans.push(ep.connect().await.unwrap());
    }
    let datagram = chans[0].ud_datagram_limit().unwrap() as u64;
    let mut tasks = Vec::new();
    for (i, ch) in chans.iter().enumerate() {
        let ch = ch.clone();
        tasks.push(tokio::spawn(async move {
            let calls: Vec<_> = (0..4u64)
                .map(|k| {
                    let ch = ch.clone();
                    tokio::spawn(
                        async move { call(&ch, ECHO, i as u64 * 4 + k, vec![7; 64]).await },
                    )
                })
                .collect();
            for c in calls {
                c.await.unwrap().unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = srv.stats.get().unwrap();
    println!(
        "{CLIENTS} UD clients on {} ({:?}): {s:?}, datagram {datagram}",
        sdev.name(),
        sdev.provider()
    );
    assert_eq!(s.sessions, CLIENTS as u64);
    assert_eq!(s.executed, (CLIENTS * 4) as u64);
    // The stated bound: per session at most `window` entries and `window` datagrams.
    assert!(s.max_session_entries <= u64::from(WINDOW), "{s:?}");
    assert!(s.entries_in_use <= CLIENTS as u64 * u64::from(WINDOW));
    assert!(s.reply_buffer_bytes <= CLIENTS as u64 * u64::from(WINDOW) * datagram);
    drop(chans);
    eventually("every session freed", || {
        srv.stats
            .get()
            .is_some_and(|s| s.sessions == 0 && s.entries_in_use == 0)
    })
    .await;
    srv.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_too_big_for_a_datagram_goes_over_rc_or_fails_naming_the_limit() {
    let (sdev, cdev) = (device(), device());
    if !has_ud_or_falls_back(&sdev).await {
        return;
    }
    let count = Count::new(8);
    let srv = serve(Server::builder(), &sdev, count.clone()).await;
    let ch = srv.ud(&cdev).connect().await.unwrap();
    let limit = ch.ud_datagram_limit().unwrap();
    let big = vec![5u8; limit + 100];
    let r = call(&ch, ECHO, 1, big.clone()).await.unwrap();
    assert_eq!(r.data, big, "the big call went over RC");
    assert_eq!(ch.ud_stats().unwrap().calls, 0, "not over UD");
    assert_eq!(call(&ch, ECHO, 2, vec![1]).await.unwrap().id, 2);
    assert_eq!(ch.ud_stats().unwrap().calls, 1);
    srv.shut_down().await;

    let srv = serve(Server::builder().accept_rc(false), &sdev, count.clone()).await;
    let ch = srv.ud(&cdev).connect().await.unwrap();
    let e = call(&ch, ECHO, 3, big).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message()
            .contains(&format!("UD payload limit of {limit} bytes")),
        "{e:?}"
    );
    assert_eq!(count.runs(3), 0);
    // RC clients are refused by that server.
    let rc = format!("rdma://{}", srv.addr);
    let ep = Endpoint::from_shared(rc).unwrap().rdma_device(cdev.clone());
    let refused = format!("{:?}", ep.connect().await.unwrap_err());
    assert!(refused.contains("does not accept RC"), "{refused}");
    srv.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_too_big_for_a_datagram_is_resource_exhausted_and_runs_once() {
    let (sdev, cdev) = (device(), device());
    if !has_ud_or_falls_back(&sdev).await {
        return;
    }
    let count = Count::new(100_000);
    let srv = serve(Server::builder(), &sdev, count.clone()).await;
    let ch = srv.ud(&cdev).connect().await.unwrap();
    let limit = ch.ud_datagram_limit().unwrap();
    let id = (limit + 10) as u64;
    let e = call(&ch, BIG, id, vec![]).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message()
            .contains(&format!("UD payload limit of {limit} bytes")),
        "{e:?}"
    );
    assert_eq!(count.runs(id as usize), 1);
    assert_eq!(srv.stats.get().unwrap().replies_too_big, 1);
    // A reply that fits still works.
    assert_eq!(call(&ch, BIG, 100, vec![]).await.unwrap().data.len(), 100);
    srv.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn total_loss_ends_a_ud_call_at_its_deadline() {
    let (sdev, cdev) = (soft(), soft());
    if !has_ud_or_falls_back(&sdev).await {
        return;
    }
    let count = Count::new(4);
    let srv = serve(Server::builder(), &sdev, count.clone()).await;
    let ch = srv.ud(&cdev).connect().await.unwrap();
    cdev.set_ud_faults(UdFaults {
        loss: 1.0,
        ..UdFaults::default()
    })
    .unwrap();
    let mut g = Grpc::new(ch.clone());
    let mut req = Request::new(Echo {
        id: 1,
        data: vec![],
    });
    req.set_timeout(Duration::from_millis(200));
    let e = g.unary::<Echo, Echo>(req, ECHO).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    let st = ch.ud_stats().unwrap();
    assert!(st.retransmissions > 0 && st.deadlines == 1, "{st:?}");
    assert_eq!(count.runs(1), 0);
    srv.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_goes_away_ends_ud_calls_unavailable() {
    // Over UD, or over RC where the device has none (the fallback).
    let (sdev, cdev) = (device(), device());
    let srv = serve(Server::builder(), &sdev, Count::new(4)).await;
    let ch = srv.ud(&cdev).connect().await.unwrap();
    assert_eq!(call(&ch, ECHO, 1, vec![]).await.unwrap().id, 1);
    srv.shut_down().await;
    // Whether the call starts before or after the client notices, it ends UNAVAILABLE.
    let e = call(&ch, ECHO, 2, vec![]).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_limit_refuses_the_next_client_naming_it() {
    let (sdev, cdev) = (device(), device());
    if !has_ud_or_falls_back(&sdev).await {
        return;
    }
    let srv = serve(Server::builder().max_ud_sessions(2), &sdev, Count::new(4)).await;
    let a = srv.ud(&cdev).connect().await.unwrap();
    let _b = srv.ud(&cdev).connect().await.unwrap();
    let e = srv.ud(&cdev).connect().await.unwrap_err();
    assert!(format!("{e:?}").contains("limit of 2 UD sessions"), "{e:?}");
    drop(a);
    eventually("a session freed", || {
        srv.stats.get().is_some_and(|s| s.sessions == 1)
    })
    .await;
    srv.ud(&cdev).connect().await.unwrap();
    srv.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slower_than_the_retry_budget_still_answers_once() {
    let (sdev, cdev) = (device(), device());
    if !has_ud_or_falls_back(&sdev).await {
        return;
    }
    let count = Count::new(4);
    let srv = serve(Server::builder(), &sdev, count.clone()).await;
    let ch = srv.ud(&cdev).connect().await.unwrap();
    // 4.5 s: longer than 40 retransmissions with backoff to 100 ms (about 3.5 s). The
    // server's IN_PROGRESS answers to the retransmissions keep the call alive.
    let r = call(&ch, SLEEP, 1, vec![0; 45]).await.unwrap();
    assert_eq!(r.id, 1);
    assert_eq!(count.runs(1), 1);
    let st = ch.ud_stats().unwrap();
    assert!(st.in_progress > 0 && st.gave_up == 0, "{st:?}");
    srv.shut_down().await;
}
