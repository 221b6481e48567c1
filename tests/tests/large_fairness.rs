//! Fairness between large and small calls on one server (issue 15, "Fairness"): while
//! 64 MiB echo calls are in flight on two connections (two on one, one on the other),
//! small calls keep completing on those connections and on a third that carries no
//! large call. Asserted without timing: the server holds the large calls (each
//! 64 MiB request received, its reply not yet sent; a's second waits for its first,
//! the client lending one at a time) until each connection has completed
//! `MIN_SMALL` small calls since one was held on a and on b. A stack that
//! serialises small calls behind a large one never gets there: the hold gives up
//! after `HOLD_LIMIT` (a bound against a hang) and the test fails, naming the counts.
//! (Counting small calls in whatever time the large calls took, as this test once
//! did, failed now and then on a loaded machine: 9 to 16 on a connection sharing
//! its queue pair with 64 MiB in 4 runs of 40, against a bound of 20.)
//!
//! The parts that once held everything are asserted exactly, each with a body whose
//! encoding (or a handler) holds its thread until a small call has completed, which it
//! can only do if the thread held is not one the small call needs: the server's
//! receive loop (a handler of a request by reference, the encoding of a reply by
//! reference), and the client's connection lock (the encoding of a request by
//! reference, on the same channel as the small call).
//!
//! What bounds a small call's wait beside 64 MiB transfers, and the figures measured,
//! are in the `small_beside_large` example.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rpc_core::client::Grpc;
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Channel, CompletionMode, Endpoint, Server};
use rpc_core::{Request, Response, Status};
use tests::{path, serve_router, Echo, EchoService};
use tokio::sync::{oneshot, Notify};

/// Large bodies: 64 MiB, the size the stall was seen with.
const LARGE: usize = 64 << 20;
/// Small calls each connection must complete while the large calls are held in
/// flight: more than one or two, which a stack that serialises small calls behind a
/// large one would let through per large call.
const MIN_SMALL: usize = 20;

/// Small calls completed while the large calls were held in flight, per connection.
struct Counts {
    /// The connection carrying two large calls.
    a: usize,
    /// The connection carrying one.
    b: usize,
    /// The connection carrying none.
    quiet: usize,
}

async fn echo(ch: &Channel, id: u64, data: Vec<u8>) -> Echo {
    let mut g = Grpc::new(ch.clone());
    g.unary::<Echo, Echo>(Request::new(Echo { id, data }), path("Echo"))
        .await
        .unwrap_or_else(|e| panic!("call {id}: {e:?}"))
        .into_inner()
}

/// A 64 MiB body marked by `id` at both ends and in the middle, built by `vec![0; n]`
/// (one zeroed allocation): a byte-by-byte fill runs slowly in a debug build, on a
/// runtime worker the server shares.
fn large_body(id: u64) -> Vec<u8> {
    let mut v = vec![0u8; LARGE];
    for at in [0, LARGE / 2, LARGE - 1] {
        v[at] = id as u8;
    }
    v
}

async fn connect(uri: &str) -> Channel {
    Endpoint::from_shared(uri.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// How far the mixed run has got, shared by its small calls, its large calls'
/// handlers and the test.
#[derive(Default)]
struct Progress {
    /// Small calls completed, per connection (a, b, quiet).
    small: [AtomicUsize; 3],
    /// Large calls whose handler holds them, per connection (a, b).
    large_held: [AtomicUsize; 2],
    /// The large calls may answer.
    released: AtomicBool,
    /// The small calls stop.
    done: AtomicBool,
    /// Signalled on every change above.
    changed: Notify,
}

impl Progress {
    /// Waits until `ready` holds.
    async fn until(&self, ready: impl Fn(&Progress) -> bool) {
        loop {
            let changed = self.changed.notified();
            if ready(self) {
                return;
            }
            changed.await;
        }
    }

    /// Waits until `ready` holds, or `HOLD_LIMIT` has passed (false): a bound
    /// against a hang, never a synchronisation.
    async fn within_limit(&self, ready: impl Fn(&Progress) -> bool) -> bool {
        tokio::time::timeout(HOLD_LIMIT, self.until(ready))
            .await
            .is_ok()
    }

    fn bump(&self, counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    fn counts(&self) -> [usize; 3] {
        self.small.each_ref().map(|c| c.load(Ordering::Acquire))
    }
}

/// `test.Gated/Echo`: an echo that holds its call (without holding its thread) until
/// the test releases it (which it does even when it gives up waiting).
#[derive(Clone)]
struct GatedEcho(Arc<Progress>);

impl NamedService for GatedEcho {
    const NAME: &'static str = "test.Gated";
}

impl tower::Service<ServerCall> for GatedEcho {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        let p = self.0.clone();
        Box::pin(async move {
            let m = call.into_request::<Echo>()?.into_inner();
            // Calls 1 and 2 on connection a, 3 on b.
            p.bump(&p.large_held[usize::from(m.id == 3)]);
            p.until(|p| p.released.load(Ordering::Acquire)).await;
            Ok(Response::new(ReplyBody::message(m)))
        })
    }
}

/// Small calls one after another on `ch` (connection `i`) until the run is done.
async fn small_calls(ch: Channel, i: usize, p: Arc<Progress>) {
    let mut k = 0;
    while !p.done.load(Ordering::Acquire) {
        let r = echo(&ch, (i as u64 + 1) * 1_000_000 + k, b"small".to_vec()).await;
        assert_eq!(r.data, b"small");
        p.bump(&p.small[i]);
        k += 1;
    }
}

/// Three 64 MiB echo calls (two on connection a, one on b) and small calls on a, b and
/// a quiet third connection, all to one server; the server holds the large calls
/// until every connection has completed `MIN_SMALL` small calls since one was held
/// on a and on b (or `HOLD_LIMIT`); every large call must then come back intact.
async fn run_mixed() -> Counts {
    let p = Arc::new(Progress::default());
    let router = Server::builder()
        .add_service(GatedEcho(p.clone()))
        .add_service(EchoService);
    let (addr, _stop) = serve_router(router).await;
    let uri = format!("rdma://{addr}");
    let (a, b, quiet) = (
        connect(&uri).await,
        connect(&uri).await,
        connect(&uri).await,
    );
    let mut large = Vec::new();
    for (id, ch) in [(1u64, a.clone()), (2, a.clone()), (3, b.clone())] {
        large.push(tokio::spawn(async move {
            let mut g = Grpc::new(ch);
            let req = Request::new(Echo {
                id,
                data: large_body(id),
            });
            let r = g
                .unary::<Echo, Echo>(req, "/test.Gated/Echo")
                .await
                .unwrap_or_else(|e| panic!("large call {id}: {e:?}"))
                .into_inner();
            assert_eq!(r.id, id);
            // `==` is a memcmp: an element-wise loop in a debug build would hold a
            // runtime worker the server shares.
            assert!(
                r.data == large_body(id),
                "large call {id} came back changed"
            );
        }));
    }
    let small: Vec<_> = [a, b, quiet]
        .into_iter()
        .enumerate()
        .map(|(i, ch)| tokio::spawn(small_calls(ch, i, p.clone())))
        .collect();
    // A client lends at most half its pool (80 MiB by default) to requests: a's
    // second 64 MiB request waits for its first to end.
    let both_held = |p: &Progress| p.large_held.iter().all(|n| n.load(Ordering::Acquire) > 0);
    assert!(
        p.within_limit(both_held).await,
        "no 64 MiB call reached its handler within {HOLD_LIMIT:?} on connection a or b"
    );
    let before = p.counts();
    let enough = |p: &Progress| {
        let now = p.counts();
        (0..3).all(|i| now[i] - before[i] >= MIN_SMALL)
    };
    // Whether or not enough came (the assertions say), the large calls go on.
    p.within_limit(enough).await;
    let now = p.counts();
    p.released.store(true, Ordering::Release);
    p.changed.notify_waiters();
    for t in large {
        t.await.unwrap();
    }
    p.done.store(true, Ordering::Release);
    for t in small {
        t.await.unwrap();
    }
    Counts {
        a: now[0] - before[0],
        b: now[1] - before[1],
        quiet: now[2] - before[2],
    }
}

/// What the server shares between connections: its receive loop (which must not run
/// a 64 MiB request's handler inline) and its CQ, whose polls drive the provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_calls_on_a_quiet_connection_keep_completing_beside_64_mib_calls() {
    let c = run_mixed().await;
    assert!(
        c.quiet >= MIN_SMALL,
        "the quiet connection completed {} small calls in {HOLD_LIMIT:?} while 64 MiB \
         calls were held in flight (at least {MIN_SMALL} expected; a {}, b {})",
        c.quiet,
        c.a,
        c.b
    );
}

/// The connections carrying the large calls: besides the server, their client
/// connection must not hold its small calls behind a large one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_calls_on_connections_carrying_64_mib_calls_keep_completing() {
    let c = run_mixed().await;
    for (name, n) in [("a (two large calls)", c.a), ("b (one large call)", c.b)] {
        assert!(
            n >= MIN_SMALL,
            "connection {name} completed {n} small calls in {HOLD_LIMIT:?} while 64 MiB \
             calls were held in flight (at least {MIN_SMALL} expected; a {}, b {}, \
             quiet {})",
            c.a,
            c.b,
            c.quiet
        );
    }
}

/// How long a holding handler waits for its release before it gives up: a bound
/// against a hang (the failure it reports), never a synchronisation.
const HOLD_LIMIT: Duration = Duration::from_secs(20);

/// `test.Hold/Hold`: decodes its request, says it started, then blocks its thread
/// (as a handler computing on a large body does) until the test releases it.
#[derive(Clone, Default)]
struct HoldService {
    started: Arc<Notify>,
    released: Arc<(Mutex<bool>, Condvar)>,
}

impl HoldService {
    /// Says it started, then blocks the thread until released (true) or until
    /// `HOLD_LIMIT` (false).
    fn hold(&self) -> bool {
        self.started.notify_one();
        let (lock, cv) = &*self.released;
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (released, _) = cv
            .wait_timeout_while(guard, HOLD_LIMIT, |r| !*r)
            .unwrap_or_else(|e| e.into_inner());
        *released
    }

    fn release(&self) {
        let (lock, cv) = &*self.released;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }
}

/// A 1 MiB `Echo` reply (beyond the rendezvous threshold: sent by reference) whose
/// encoding holds its thread until released, as encoding a large body does: its
/// bytes are 1 if it was released, 0 if it gave up waiting.
struct HeldReply {
    hold: HoldService,
    id: u64,
}

impl HeldReply {
    fn echo(&self, byte: u8) -> Echo {
        Echo {
            id: self.id,
            data: vec![byte; 1 << 20],
        }
    }
}

impl rpc_core::server::EncodeMessage for HeldReply {
    fn encoded_len(&self) -> usize {
        prost::Message::encoded_len(&self.echo(1))
    }

    fn encode_to(&self, out: &mut [u8]) {
        let byte = u8::from(self.hold.hold());
        let mut buf = &mut out[..];
        prost::Message::encode(&self.echo(byte), &mut buf).expect("room for the reply");
    }
}

impl NamedService for HoldService {
    const NAME: &'static str = "test.Hold";
}

impl tower::Service<ServerCall> for HoldService {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            let large_reply = call.method() == "LargeReply";
            let m = call.into_request::<Echo>()?.into_inner();
            if large_reply {
                // Answers at once; the encoding of the reply is what holds.
                return Ok(Response::new(ReplyBody::message(HeldReply {
                    hold: me,
                    id: m.id,
                })));
            }
            if !me.hold() {
                return Err(Status::deadline_exceeded(format!(
                    "no small call completed within {HOLD_LIMIT:?} while this handler \
                     held its thread: the server ran it on its receive loop"
                )));
            }
            Ok(Response::new(ReplyBody::message(Echo {
                id: m.id,
                data: vec![],
            })))
        })
    }
}

/// A server of `test.Hold` and echo, and two connections to it: one for the call
/// that holds a thread, one quiet.
async fn hold_server() -> (HoldService, Channel, Channel, oneshot::Sender<()>) {
    let hold = HoldService::default();
    let router = Server::builder()
        .add_service(hold.clone())
        .add_service(EchoService);
    let (addr, stop) = serve_router(router).await;
    let uri = format!("rdma://{addr}");
    let (big, quiet) = (connect(&uri).await, connect(&uri).await);
    (hold, big, quiet, stop)
}

/// A handler of a request by reference (1 MiB, beyond the default rendezvous
/// threshold) that holds its thread does not hold the server's receive loop: a small
/// call on another connection completes meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_of_a_request_by_reference_does_not_hold_other_connections() {
    let (hold, big, quiet, _stop) = hold_server().await;
    let started = hold.started.notified();
    let held = tokio::spawn(async move {
        let mut g = Grpc::new(big);
        let req = Echo {
            id: 7,
            data: vec![0u8; 1 << 20],
        };
        g.unary::<Echo, Echo>(Request::new(req), "/test.Hold/Hold")
            .await
            .map(|r| r.into_inner().id)
    });
    started.await;
    // The handler holds its thread now; this call needs the server's receive loop.
    let small = echo(&quiet, 8, b"small".to_vec()).await;
    assert_eq!(small.data, b"small");
    hold.release();
    match held.await.unwrap() {
        Ok(id) => assert_eq!(id, 7),
        Err(s) => panic!("the holding call failed: {s:?}"),
    }
}

/// A handler that answers a small request at once with a reply by reference (1 MiB)
/// whose encoding holds its thread does not hold the server's receive loop: a small
/// call on another connection completes meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoding_a_reply_by_reference_does_not_hold_other_connections() {
    let (hold, big, quiet, _stop) = hold_server().await;
    let started = hold.started.notified();
    let held = tokio::spawn(async move {
        let mut g = Grpc::new(big);
        let req = Echo {
            id: 9,
            data: b"small request".to_vec(),
        };
        g.unary::<Echo, Echo>(Request::new(req), "/test.Hold/LargeReply")
            .await
            .map(|r| r.into_inner())
    });
    started.await;
    // The reply's encoding holds its thread now; this call needs the receive loop.
    let small = echo(&quiet, 10, b"small".to_vec()).await;
    assert_eq!(small.data, b"small");
    hold.release();
    let reply = held.await.unwrap().expect("the large reply");
    assert_eq!(reply.id, 9);
    assert!(
        reply.data == vec![1; 1 << 20],
        "the reply was encoded without its release: no small call completed within \
         {HOLD_LIMIT:?} while its encoding held the thread (the server encoded it on \
         its receive loop)"
    );
}

/// A 1 MiB `Echo` request (beyond the rendezvous threshold: sent by reference) whose
/// encoding holds its thread until released, as encoding a large body does: its
/// bytes are 1 if it was released, 0 if it gave up waiting.
struct HeldRequest {
    hold: HoldService,
    released: Echo,
    gave_up: Echo,
}

impl HeldRequest {
    fn new(hold: HoldService, id: u64) -> HeldRequest {
        let body = |byte| Echo {
            id,
            data: vec![byte; 1 << 20],
        };
        HeldRequest {
            hold,
            released: body(1),
            gave_up: body(0),
        }
    }
}

impl prost::Message for HeldRequest {
    fn encode_raw(&self, buf: &mut impl prost::bytes::BufMut) {
        if self.hold.hold() {
            self.released.encode_raw(buf);
        } else {
            self.gave_up.encode_raw(buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl prost::bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        self.released.merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.released.encoded_len()
    }

    fn clear(&mut self) {
        self.released.clear();
    }
}

/// A request by reference (1 MiB) whose encoding holds its thread does not hold the
/// other calls of its connection: a small call on the same channel completes
/// meanwhile. The body is encoded into its region before the connection's lock is
/// taken; encoded under it (as before), the small call would wait on that lock until
/// the encoding gave up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoding_a_request_by_reference_does_not_hold_its_connection() {
    let (hold, big, _quiet, _stop) = hold_server().await;
    let started = hold.started.notified();
    let held = {
        let (hold, big) = (hold.clone(), big.clone());
        tokio::spawn(async move {
            let mut g = Grpc::new(big);
            g.unary::<HeldRequest, Echo>(Request::new(HeldRequest::new(hold, 11)), path("Echo"))
                .await
                .map(|r| r.into_inner())
        })
    };
    started.await;
    // The request's encoding holds its thread now; this call uses the same connection.
    let small = echo(&big, 12, b"small".to_vec()).await;
    assert_eq!(small.data, b"small");
    hold.release();
    let reply = held.await.unwrap().expect("the held call");
    assert_eq!(reply.id, 11);
    assert!(
        reply.data == vec![1; 1 << 20],
        "the request was encoded without its release: no small call on its connection \
         completed within {HOLD_LIMIT:?} while its encoding held the thread (the client \
         encoded it under the connection's lock)"
    );
}

/// A caller that wakes its connection's driver and then blocks its thread does not
/// hold the driver, nor the replies of the connection's other calls. tokio leaves a
/// task woken from a worker in that worker's LIFO slot, which no other worker takes:
/// the driver waited there for the blocked thread (as the server's poller did beside
/// the encoding above, woken by an I/O poll of the worker that then took it).
/// Starting a call with a deadline wakes a driver asleep (`Event` mode: it sleeps as
/// soon as it is idle) for the call's timer; the caller then blocks in the same poll
/// until a small call on the same channel has completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_blocking_its_thread_after_waking_the_driver_does_not_hold_the_connection() {
    let (addr, _stop) = serve_router(Server::builder().add_service(EchoService)).await;
    let ch = Endpoint::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .completion_mode(CompletionMode::Event)
        .connect()
        .await
        .unwrap();
    // Warm: the first call on a connection waits for its credit window.
    echo(&ch, 0, vec![]).await;
    let hold = HoldService::default();
    let started = hold.started.notified();
    let blocker = {
        let (ch, hold) = (ch.clone(), hold.clone());
        tokio::spawn(async move {
            let mut g = Grpc::new(ch);
            let mut req = Request::new(Echo {
                id: 1,
                data: vec![],
            });
            req.set_timeout(Duration::from_secs(600));
            let mut call = std::pin::pin!(g.unary::<Echo, Echo>(req, path("Echo")));
            // One poll starts the call (and wakes the driver for its deadline).
            let mut done = None;
            std::future::poll_fn(|cx| {
                if let Poll::Ready(r) = call.as_mut().poll(cx) {
                    done = Some(r);
                }
                Poll::Ready(())
            })
            .await;
            let released = hold.hold();
            let reply = match done {
                Some(r) => r,
                None => call.await,
            };
            (released, reply.map(|r| r.into_inner().id))
        })
    };
    started.await;
    let small = echo(&ch, 2, b"small".to_vec()).await;
    assert_eq!(small.data, b"small");
    hold.release();
    let (released, first) = blocker.await.unwrap();
    assert_eq!(first.expect("the blocking caller's call"), 1);
    assert!(
        released,
        "no small call completed within {HOLD_LIMIT:?} while a caller that had woken \
         the connection's driver blocked its thread (the driver waited in that \
         worker's LIFO slot)"
    );
}
