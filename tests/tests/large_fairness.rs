//! Fairness between large and small calls on one server (issue 15, "Fairness"): while
//! 64 MiB echo calls are in flight on two connections (two on one, one on the other),
//! small calls keep completing on those connections and on a third that carries no
//! large call. Asserted by counting small calls completed before the first large call
//! ends, never by timing: a fair stack completes hundreds per connection in that
//! window even in a debug build on a loaded machine (111 to 1,496 in six runs), one
//! that serialises small calls behind a large transfer one or two.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rpc_core::client::Grpc;
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Channel, CompletionMode, Endpoint, Server};
use rpc_core::{Request, Response, Status};
use tests::{init_tracing, path, serve_echo, serve_router, Echo, EchoService};
use tokio::sync::{oneshot, Notify};

/// Large bodies: 64 MiB, the size the stall was seen with.
const LARGE: usize = 64 << 20;
/// Small calls a connection must complete while every large call is in flight. A
/// fair stack completes hundreds (a small round trip takes microseconds to a
/// millisecond, a 64 MiB echo about a second in a debug build); one that serialises
/// small calls behind large ones completes one or two per large call.
const MIN_SMALL: usize = 20;

/// Small calls completed while every large call was in flight, per connection.
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

/// Small calls one after another on `ch` while `all_large_in_flight` holds; how many
/// completed while it held.
async fn small_calls(ch: Channel, base: u64, all_large_in_flight: Arc<AtomicBool>) -> usize {
    let mut during = 0;
    let mut k = 0;
    while all_large_in_flight.load(Ordering::Acquire) {
        let r = echo(&ch, base + k, b"small".to_vec()).await;
        assert_eq!(r.data, b"small");
        if all_large_in_flight.load(Ordering::Acquire) {
            during += 1;
        }
        k += 1;
    }
    during
}

/// Three 64 MiB echo calls (two on connection a, one on b) and small calls on a, b and
/// a quiet third connection, all to one server; every large call must come back
/// intact.
async fn run_mixed() -> Counts {
    init_tracing();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (addr, _task) = serve_echo(Server::builder(), async move {
        let _ = stop_rx.await;
    })
    .await;
    let uri = format!("rdma://{addr}");
    let (a, b, quiet) = (
        connect(&uri).await,
        connect(&uri).await,
        connect(&uri).await,
    );
    let all_large_in_flight = Arc::new(AtomicBool::new(true));
    let mut large = Vec::new();
    for (id, ch) in [(1u64, a.clone()), (2, a.clone()), (3, b.clone())] {
        let flag = all_large_in_flight.clone();
        large.push(tokio::spawn(async move {
            let r = echo(&ch, id, large_body(id)).await;
            // The first large call to end closes the window the small calls count in.
            flag.store(false, Ordering::Release);
            assert_eq!(r.id, id);
            // `==` is a memcmp: an element-wise loop in a debug build would hold a
            // runtime worker the server shares.
            assert!(
                r.data == large_body(id),
                "large call {id} came back changed"
            );
        }));
    }
    let small: Vec<_> = [(a, 1_000_000u64), (b, 2_000_000), (quiet, 3_000_000)]
        .into_iter()
        .map(|(ch, base)| tokio::spawn(small_calls(ch, base, all_large_in_flight.clone())))
        .collect();
    for t in large {
        t.await.unwrap();
    }
    let mut n = Vec::new();
    for t in small {
        n.push(t.await.unwrap());
    }
    let _ = stop_tx.send(());
    Counts {
        a: n[0],
        b: n[1],
        quiet: n[2],
    }
}

/// What the server shares between connections: its receive loop (which must not run
/// a 64 MiB request's handler inline) and its CQ, whose polls drive the provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_calls_on_a_quiet_connection_keep_completing_beside_64_mib_calls() {
    let c = run_mixed().await;
    assert!(
        c.quiet >= MIN_SMALL,
        "the quiet connection completed {} small calls while every 64 MiB call was in \
         flight (at least {MIN_SMALL} expected; a {}, b {})",
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
            "connection {name} completed {n} small calls while every 64 MiB call was in \
             flight (at least {MIN_SMALL} expected; a {}, b {}, quiet {})",
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
