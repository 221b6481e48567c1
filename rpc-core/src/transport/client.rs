//! The client: one RC connection per `Channel`, its driver task, and the
//! `tower::Service` that callers post through.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prost::Message;
use rpc_transport::msg::{self, handshake, RecvPool, RecvTarget, SendRing};
use rpc_transport::{
    AccessFlags, CompletionQueue, Device, QpCap, QpInitAttr, QpType, WcOpcode, WorkCompletion,
};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
use tower::Service;

use super::lock;
use super::ready::ReadyWaiters;
use crate::client::{IncomingReply, OutgoingCall};
use crate::engine::{ClientConfig, ClientConn, Completion, Reply};
use crate::handshake::{check_rc, ClientHello, HandshakeError, RcAsk};
use crate::payload::Payload;
use crate::server::BoxFuture;
use crate::status::Status;
use crate::transport::endpoint::Endpoint;
use crate::transport::poll::{self, CompletionMode};
use crate::transport::Error;

type Waiter = oneshot::Sender<Result<IncomingReply, Status>>;

/// What callers, the driver task and the receive pool's repost hook share without
/// the engine's lock.
struct Shared {
    /// Tokens returned by reposts and not yet handed to the engine.
    returned: AtomicU32,
    /// Callers waiting in `poll_ready`.
    ready: ReadyWaiters,
    /// Set while queued frames (fragments, RFRs, CANCELs) wait for tokens: only then
    /// does a returned token need the driver. Kicking it on every repost would cost a
    /// task wake-up and a futile CQ poll per call.
    starved: AtomicBool,
    /// Work for the driver that no completion announces (returned tokens with
    /// fragments waiting, a cancel to send, shutdown).
    kick: Notify,
    /// Tells the liveness watcher to let go of the TCP connection.
    shutdown: Notify,
    closing: AtomicBool,
}

impl Shared {
    fn wake_ready(&self) {
        self.ready.wake_all();
    }
}

struct State {
    engine: ClientConn<Waiter>,
    ring: SendRing,
    /// Send slots promised to callers by `poll_ready`.
    reserved_slots: usize,
}

/// One connection.
struct Conn {
    shared: Arc<Shared>,
    state: Mutex<State>,
    pool: RecvPool,
    cq: Arc<CompletionQueue>,
    mode: CompletionMode,
    default_timeout: Option<Duration>,
}

/// The device client connections of this process share (one soft NIC or one verbs
/// context), opened on first use; or the one the endpoint names.
pub(crate) fn shared_device(ep: &Endpoint) -> rpc_transport::Result<Device> {
    static DEFAULT: OnceLock<Device> = OnceLock::new();
    if let Some(d) = &ep.settings.rdma_device {
        return Ok(d.clone());
    }
    let name = ep.settings.device.as_deref();
    if name.is_some() {
        return msg::open_device(name);
    }
    if let Some(d) = DEFAULT.get() {
        return Ok(d.clone());
    }
    let d = msg::open_device(None)?;
    Ok(DEFAULT.get_or_init(|| d).clone())
}

pub(crate) async fn connect(ep: &Endpoint) -> Result<Channel, Error> {
    let s = &ep.settings;
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((ep.host.as_str(), ep.port))
        .await?
        .collect();
    let addr = addrs
        .first()
        .ok_or_else(|| Error::new(format!("{} resolves to nothing", ep.host)))?;
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;

    let dev = shared_device(ep)?;
    let pd = dev.alloc_pd()?;
    // One CQ for sends and receives, so one poller sees everything of the connection.
    // One credit more than calls in flight: the engine keeps it for CANCEL frames.
    let ask = s.credits + 1;
    let cq = Arc::new(dev.create_cq(2 * ask + 16)?);
    let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: ask,
        max_recv_wr: ask,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = Arc::new(pd.create_qp(&init)?);
    let psn = psn();
    let hello = ClientHello::new(RcAsk {
        credits: ask,
        slot_size: s.slot_size as u32,
        max_message: s.max_message as u64,
    });
    handshake::send(&mut tcp, &qp.endpoint(psn)?, &hello.encode()).await?;
    let reply = handshake::recv(&mut tcp)
        .await
        .map_err(HandshakeError::from)?;
    let grant = check_rc(&hello, &reply.payload)?;
    let credits = grant.credits;
    let slot = grant.slot_size as usize;
    qp.connect_rc(&reply.endpoint, psn, AccessFlags::empty())?;

    let shared = Arc::new(Shared {
        returned: AtomicU32::new(0),
        starved: AtomicBool::new(false),
        ready: ReadyWaiters::default(),
        kick: Notify::new(),
        shutdown: Notify::new(),
        closing: AtomicBool::new(false),
    });
    let hook = {
        let shared = shared.clone();
        Box::new(move |n: u32| {
            // SeqCst pairs with `pump`: either it sees these tokens or we see `starved`.
            shared.returned.fetch_add(n, Ordering::SeqCst);
            if shared.starved.load(Ordering::SeqCst) {
                shared.kick.notify_one();
            }
            shared.wake_ready();
        })
    };
    let pool = RecvPool::new(&pd, RecvTarget::Qp(qp.clone()), credits, slot, Some(hook))?;
    let ring = SendRing::new(&pd, qp.clone(), credits, slot)?;
    let engine = ClientConn::new(ClientConfig {
        credits,
        frame_size: slot,
        max_send_message: s.max_message.min(grant.max_message as usize),
        max_recv_message: s.max_message,
    });
    let conn = Arc::new(Conn {
        shared,
        state: Mutex::new(State {
            engine,
            ring,
            reserved_slots: 0,
        }),
        pool,
        cq,
        mode: s.mode,
        default_timeout: s.timeout,
    });
    tracing::debug!(peer = %addr, credits, slot, "connected");
    tokio::spawn(drive(conn.clone()));
    tokio::spawn(watch(conn.clone(), tcp));
    Ok(Channel {
        inner: Arc::new(Handle { conn }),
        reserved: false,
    })
}

/// An initial PSN that differs between connections (24 bits).
fn psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ (t >> 8)) & 0x00ff_ffff
}

impl Conn {
    /// Hands returned tokens to the engine.
    fn sync_tokens(&self, st: &mut State) {
        let n = self.shared.returned.swap(0, Ordering::AcqRel);
        if n > 0 {
            st.engine.handle_tokens_returned(n);
        }
    }

    /// Sends what the engine has queued while credits and unpromised slots last.
    /// Frames left waiting for tokens mark the connection starved, so that the repost
    /// hook kicks the driver when tokens come back (a lack of slots needs no kick:
    /// send completions reach the driver anyway).
    fn pump(&self, st: &mut State) {
        loop {
            self.sync_tokens(st);
            while st.engine.wants_transmit()
                && st.engine.free_tokens() > 0
                && st.ring.free_slots() > st.reserved_slots
            {
                let slot = st.ring.acquire().expect("free slot checked");
                let Some(t) = st.engine.poll_transmit(st.ring.buf(&slot)) else {
                    st.ring.release(slot);
                    break;
                };
                if st.ring.holds() {
                    // Behind held requests: frames of a call must not overtake its REQ.
                    st.ring.hold(slot, t.len, t.imm);
                } else if let Err(e) = st.ring.post(slot, t.len, t.imm) {
                    self.fail(st, Status::unavailable(format!("post failed: {e}")));
                    return;
                }
            }
            let starved = st.engine.wants_transmit() && st.engine.free_tokens() <= 1;
            self.shared.starved.store(starved, Ordering::SeqCst);
            if !starved || self.shared.returned.load(Ordering::SeqCst) == 0 {
                return;
            }
            // Tokens came back between the look and the flag: use them now.
        }
    }

    /// Posts the requests callers held back (see `start`) as one list.
    fn flush_held(&self, st: &mut State) {
        if st.ring.holds() {
            if let Err(e) = st.ring.uncork() {
                self.fail(st, Status::unavailable(format!("post failed: {e}")));
            }
        }
    }

    /// Ends every call: the connection is unusable.
    fn fail(&self, st: &mut State, status: Status) {
        if st.engine.dead().is_none() {
            tracing::debug!(%status, "connection lost");
        }
        st.engine.handle_peer_lost(status);
        while let Some(c) = st.engine.poll_completion() {
            let status = c
                .result
                .err()
                .unwrap_or_else(|| Status::unavailable("connection lost"));
            let _ = c.waiter.send(Err(status));
        }
        self.shared.wake_ready();
        self.shared.kick.notify_one();
    }

    fn deliver(c: Completion<Waiter>, slot: Option<rpc_transport::msg::RecvSlot>) {
        let r = c.result.map(|reply| match (reply, slot) {
            (Reply::InFrame { metadata, body }, Some(slot)) => IncomingReply {
                metadata,
                payload: Payload::from_slot(slot, body),
            },
            (Reply::InFrame { metadata, .. }, None) => IncomingReply {
                metadata,
                payload: Payload::from_vec(Vec::new()),
            },
            (Reply::Owned { metadata, body }, _) => IncomingReply {
                metadata,
                payload: Payload::from_vec(body),
            },
        });
        // A caller that went away drops the reply (and with it the slot).
        let _ = c.waiter.send(r);
    }

    /// Handles a batch of completions under one lock and one repost post list.
    fn handle(&self, wcs: &[WorkCompletion]) {
        let now = Instant::now();
        let batch = self.pool.batch();
        let mut st = lock(&self.state);
        let mut freed = false;
        for wc in wcs {
            if st.engine.dead().is_some() {
                break;
            }
            match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => match self.pool.complete(wc) {
                    Ok(slot) => {
                        let imm = wc.imm_data.unwrap_or(0);
                        if let Some(c) = st.engine.handle_frame(now, imm, slot.bytes()) {
                            let keep = matches!(c.result, Ok(Reply::InFrame { .. }));
                            Self::deliver(c, keep.then_some(slot));
                        }
                    }
                    Err(status) => {
                        self.fail(
                            &mut st,
                            Status::unavailable(format!("receive failed: {status}")),
                        );
                    }
                },
                _ => {
                    let status = st.ring.handle_completion(wc);
                    freed = true;
                    if !wc.is_ok() {
                        self.fail(
                            &mut st,
                            Status::unavailable(format!("send failed: {status}")),
                        );
                    }
                }
            }
        }
        drop(batch); // reposts now, returning tokens through the hook
        self.pump(&mut st);
        self.flush_held(&mut st);
        drop(st);
        if freed {
            self.shared.wake_ready();
        }
    }
}

/// The connection's driver: reaps its CQ until the connection dies or closes.
async fn drive(conn: Arc<Conn>) {
    let mut wcs = [WorkCompletion::default(); 64];
    let mut waiter = poll::Waiter::default();
    loop {
        if conn.shared.closing.load(Ordering::Acquire) {
            return;
        }
        let r = waiter
            .wait(&conn.cq, conn.mode, &mut wcs, &conn.shared.kick)
            .await;
        match r {
            Ok(0) => {
                let mut st = lock(&conn.state);
                if st.engine.dead().is_some() {
                    return;
                }
                conn.pump(&mut st);
                conn.flush_held(&mut st);
            }
            Ok(n) => conn.handle(&wcs[..n]),
            Err(e) => {
                let mut st = lock(&conn.state);
                conn.fail(
                    &mut st,
                    Status::unavailable(format!("completion queue failed: {e}")),
                );
                return;
            }
        }
    }
}

/// Holds the handshake connection: when the server closes it, the server is gone.
async fn watch(conn: Arc<Conn>, mut tcp: TcpStream) {
    tokio::select! {
        () = handshake::closed(&mut tcp) => {
            let mut st = lock(&conn.state);
            conn.fail(&mut st, Status::unavailable("the server closed the connection"));
        }
        // Dropping the stream closes it: the server reclaims the connection.
        () = conn.shared.shutdown.notified() => {}
    }
}

/// Owned by all clones of a `Channel`; closes the connection when the last goes.
struct Handle {
    conn: Arc<Conn>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.conn.shared.closing.store(true, Ordering::Release);
        self.conn.shared.shutdown.notify_one();
        let mut st = lock(&self.conn.state);
        self.conn.fail(&mut st, Status::cancelled("channel closed"));
    }
}

/// An RC client connection (the RC flavour of [`crate::transport::Channel`]): cheap
/// to clone (clones share the connection), many calls in flight, a `tower::Service`
/// whose `poll_ready` waits for a credit and a send slot.
pub(crate) struct Channel {
    inner: Arc<Handle>,
    /// This clone holds a credit and a send slot from `poll_ready`.
    reserved: bool,
}

impl Clone for Channel {
    fn clone(&self) -> Self {
        // A reservation belongs to the clone that made it (as tower's ConcurrencyLimit).
        Channel {
            inner: self.inner.clone(),
            reserved: false,
        }
    }
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("reserved", &self.reserved)
            .finish()
    }
}

impl Channel {
    /// Takes a credit and a send slot for the next `call`, if both are free.
    fn try_reserve(&mut self, conn: &Conn) -> Option<Result<(), Status>> {
        let mut st = lock(&conn.state);
        if let Some(s) = st.engine.dead() {
            return Some(Err(s.clone()));
        }
        conn.sync_tokens(&mut st);
        if st.ring.free_slots() > st.reserved_slots && st.engine.reserve() {
            st.reserved_slots += 1;
            self.reserved = true;
            return Some(Ok(()));
        }
        None
    }

    fn unreserve(&mut self) {
        if std::mem::take(&mut self.reserved) {
            let conn = &self.inner.conn;
            let mut st = lock(&conn.state);
            st.reserved_slots -= 1;
            if st.engine.dead().is_none() {
                st.engine.unreserve();
            }
            drop(st);
            conn.shared.wake_ready();
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.unreserve();
    }
}

impl<M: Message + Send + 'static> Service<OutgoingCall<M>> for Channel {
    type Response = IncomingReply;
    type Error = Status;
    type Future = BoxFuture<IncomingReply>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        if self.reserved {
            return Poll::Ready(Ok(()));
        }
        let conn = self.inner.conn.clone();
        conn.shared
            .ready
            .poll_reserve(cx, || self.try_reserve(&conn))
    }

    fn call(&mut self, call: OutgoingCall<M>) -> Self::Future {
        if !std::mem::take(&mut self.reserved) {
            return Box::pin(async { Err(Status::internal("Channel::call without poll_ready")) });
        }
        let handle = self.inner.clone();
        let conn = &handle.conn;
        let timeout = call.timeout.or(conn.default_timeout);
        let (tx, rx) = oneshot::channel();
        let started = {
            let mut st = lock(&conn.state);
            st.reserved_slots -= 1;
            start(conn, &mut st, tx, &call, timeout)
        };
        let id = match started {
            Ok(id) => id,
            Err(s) => return Box::pin(async move { Err(s) }),
        };
        Box::pin(CallGuard::new(handle, id).wait(rx, timeout))
    }
}

/// Calls open on a connection above which a new request is left for the driver to
/// post with others. At or below it a caller posts at once: a lone call never
/// waits for a task switch. Measured with `rpc-bench` (32 B, soft provider): at 256
/// in flight batching halves the client's CPU per call.
const HOLD_ABOVE: usize = 4;

/// Encodes the call into a send slot and posts it.
fn start<M: Message + Send + 'static>(
    conn: &Conn,
    st: &mut State,
    tx: Waiter,
    call: &OutgoingCall<M>,
    timeout: Option<Duration>,
) -> Result<u32, Status> {
    if let Some(s) = st.engine.dead() {
        return Err(s.clone());
    }
    let slot = st.ring.acquire().expect("reserved by poll_ready");
    let State { engine, ring, .. } = st;
    let r = engine.start_call(
        Instant::now(),
        tx,
        call.path,
        &call.metadata,
        timeout,
        &call.message,
        ring.buf(&slot),
    );
    match r {
        Ok((id, t)) if st.engine.calls() > HOLD_ABOVE || st.ring.holds() => {
            // Many calls in flight: the driver is busy with their replies and will
            // post this request with the others of the burst, one doorbell (one
            // `send` on the soft provider) for all, instead of one per caller.
            // The first held request of a burst kicks the driver; until it posts
            // them, later ones just join the list.
            if !st.ring.holds() {
                conn.shared.kick.notify_one();
            }
            st.ring.hold(slot, t.len, t.imm);
            if st.engine.wants_transmit() {
                conn.pump(st);
            }
            Ok(id)
        }
        Ok((id, t)) => {
            if let Err(e) = st.ring.post(slot, t.len, t.imm) {
                conn.fail(st, Status::unavailable(format!("post failed: {e}")));
                return Err(Status::unavailable(format!("post failed: {e}")));
            }
            if st.engine.wants_transmit() {
                conn.pump(st);
            }
            Ok(id)
        }
        Err(s) => {
            st.ring.release(slot);
            Err(s)
        }
    }
}

/// Cancels its call in the engine when dropped before the reply came (the future
/// was dropped, or its deadline passed).
struct CallGuard {
    /// Keeps the connection open while the call is in flight, even if every
    /// `Channel` clone is gone.
    handle: Arc<Handle>,
    id: u32,
    armed: bool,
}

impl CallGuard {
    fn new(handle: Arc<Handle>, id: u32) -> CallGuard {
        CallGuard {
            handle,
            id,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    async fn wait(
        mut self,
        rx: oneshot::Receiver<Result<IncomingReply, Status>>,
        timeout: Option<Duration>,
    ) -> Result<IncomingReply, Status> {
        let r = match timeout {
            Some(t) => match tokio::time::timeout(t, rx).await {
                Ok(r) => r,
                // Returning drops `self` armed: the call is cancelled in the engine.
                Err(_) => {
                    return Err(Status::deadline_exceeded(format!(
                        "deadline of {t:?} exceeded"
                    )))
                }
            },
            None => rx.await,
        };
        self.disarm();
        r.unwrap_or_else(|_| Err(Status::unavailable("connection closed")))
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.armed {
            let conn = &self.handle.conn;
            let mut st = lock(&conn.state);
            st.engine.cancel(self.id);
            if st.engine.wants_transmit() {
                conn.shared.kick.notify_one();
            }
        }
    }
}
