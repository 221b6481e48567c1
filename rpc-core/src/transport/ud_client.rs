//! The UD flavour of a `Channel`: one UD QP, CQ, send ring and receive pool per
//! channel, a session opened over the handshake connection (which stays open as the
//! liveness channel), and a driver task that reaps completions and retransmits.
//!
//! Each call keeps its send slot until its reply arrives, so a retransmission reposts
//! the same bytes without copying; a slot posted several times is reused only once
//! all its sends completed. A reply is read in place from its receive slot. A call
//! too big for one datagram goes over an RC connection opened on first need when the
//! server accepts RC, and otherwise fails `RESOURCE_EXHAUSTED` naming the limit.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prost::Message;
use rpc_transport::msg::handshake;
use rpc_transport::msg::{self, RecvPool, RecvTarget, UdDestination, UdSendRing, UdSlot};
use rpc_transport::{
    AhAttr, CompletionQueue, QpCap, QpInitAttr, QpType, WcOpcode, WorkCompletion, GRH_LEN,
};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify, OnceCell};
use tower::{Service, ServiceExt};

use super::lock;
use super::ready::ReadyWaiters;
use crate::client::{IncomingReply, OutgoingCall};
use crate::engine::ud::{UdClient, UdClientConfig, UdClientStats, UdCompletion};
use crate::engine::Reply;
use crate::handshake::{check_ud, ClientHello, HandshakeError, UdAsk};
use crate::payload::Payload;
use crate::server::BoxFuture;
use crate::status::Status;
use crate::transport::client;
use crate::transport::endpoint::Endpoint;
use crate::transport::poll::{self, CompletionMode};
use crate::transport::ud_server::{datagram_limit, QKEY};
use crate::transport::Error;

type Waiter = oneshot::Sender<Result<IncomingReply, Status>>;

struct State {
    engine: UdClient<Waiter, UdSlot>,
    ring: UdSendRing,
    /// Send slots promised to callers by `poll_ready`.
    reserved_slots: usize,
    /// The timer the driver sleeps on (a new call kicks it only if due earlier).
    armed: Option<Instant>,
}

struct Conn {
    state: Mutex<State>,
    pool: RecvPool,
    cq: Arc<CompletionQueue>,
    dest: UdDestination,
    mode: CompletionMode,
    default_timeout: Option<Duration>,
    ready: ReadyWaiters,
    kick: Notify,
    shutdown: Notify,
    closing: AtomicBool,
    accepts_rc: bool,
    /// The RC connection for calls too big for a datagram, opened on first need.
    rc: OnceCell<client::Channel>,
    endpoint: Endpoint,
}

pub(crate) async fn connect(ep: &Endpoint) -> Result<UdChannel, Error> {
    let s = &ep.settings;
    let addr: SocketAddr = tokio::net::lookup_host((ep.host.as_str(), ep.port))
        .await?
        .next()
        .ok_or_else(|| Error::new(format!("{} resolves to nothing", ep.host)))?;
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;

    let dev = client::shared_device(ep)?;
    let pd = dev.alloc_pd()?;
    let limit = datagram_limit(&dev)?;
    let window = s.ud_window.max(1);
    // Sends: a slot per call plus room for slots whose retransmissions are in flight.
    let (sends, recvs) = (2 * window, 2 * window);
    let cq = Arc::new(dev.create_cq(4 * sends + recvs + 16)?);
    let mut init = QpInitAttr::new(QpType::Ud, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: 4 * sends,
        max_recv_wr: recvs,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = Arc::new(pd.create_qp(&init)?);
    qp.activate_ud(QKEY, 0)?;
    let hello = ClientHello::new(UdAsk {
        window,
        datagram: limit as u32,
        max_message: s.max_message as u64,
        qkey: QKEY,
    });
    handshake::send(&mut tcp, &qp.endpoint(0)?, &hello.encode()).await?;
    let reply = handshake::recv(&mut tcp)
        .await
        .map_err(HandshakeError::from)?;
    let ud = check_ud(&hello, &reply.payload)?;
    let datagram = ud.datagram as usize;
    let window = ud.window;
    let ah = Arc::new(pd.create_ah(&AhAttr::from_endpoint(
        &reply.endpoint,
        dev.preferred_gid_index(),
    ))?);
    let pool = RecvPool::new(
        &pd,
        RecvTarget::Qp(qp.clone()),
        recvs,
        GRH_LEN + datagram,
        None,
    )?;
    let ring = UdSendRing::new(&pd, qp.clone(), sends, datagram)?;
    let engine = UdClient::new(UdClientConfig::new(ud.session, window, datagram));
    let mut rc_ep = ep.clone();
    rc_ep.settings.ud = false;
    let conn = Arc::new(Conn {
        state: Mutex::new(State {
            engine,
            ring,
            reserved_slots: 0,
            armed: None,
        }),
        pool,
        cq,
        dest: UdDestination {
            ah,
            qpn: reply.endpoint.qpn,
            qkey: ud.qkey,
        },
        mode: s.mode,
        default_timeout: s.timeout,
        ready: ReadyWaiters::default(),
        kick: Notify::new(),
        shutdown: Notify::new(),
        closing: AtomicBool::new(false),
        accepts_rc: ud.accepts_rc,
        rc: OnceCell::new(),
        endpoint: rc_ep,
    });
    tracing::debug!(peer = %addr, session = ud.session, window, datagram, "UD session open");
    tokio::spawn(drive(conn.clone()));
    tokio::spawn(watch(conn.clone(), tcp));
    Ok(UdChannel {
        inner: Arc::new(Handle { conn }),
        reserved: false,
    })
}

impl Conn {
    fn wake_ready(&self) {
        self.ready.wake_all();
    }

    /// Hands an ended call to its caller and its send slot back to the ring.
    fn finish(st: &mut State, c: UdCompletion<Waiter, UdSlot>, slot: Option<msg::RecvSlot>) {
        st.ring.release(c.slot);
        let r = c.result.map(|reply| match (reply, slot) {
            (Reply::InFrame { metadata, body }, Some(slot)) => IncomingReply {
                metadata,
                payload: Payload::from_slot(slot, body.start + GRH_LEN..body.end + GRH_LEN),
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
        let _ = c.waiter.send(r);
    }

    fn fail(&self, st: &mut State, status: Status) {
        if st.engine.dead().is_none() {
            tracing::debug!(%status, "UD session lost");
        }
        st.engine.handle_peer_lost(status);
        while let Some(c) = st.engine.poll_completion() {
            Self::finish(st, c, None);
        }
        self.wake_ready();
        self.kick.notify_one();
    }

    fn handle(&self, wcs: &[WorkCompletion]) {
        let now = Instant::now();
        let batch = self.pool.batch();
        let mut st = lock(&self.state);
        let mut freed = false;
        for wc in wcs {
            match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => {
                    let slot = match self.pool.complete(wc) {
                        Ok(s) => s,
                        Err(status) => {
                            self.fail(
                                &mut st,
                                Status::unavailable(format!("UD receive failed: {status}")),
                            );
                            continue;
                        }
                    };
                    if slot.len() < GRH_LEN || st.engine.dead().is_some() {
                        continue;
                    }
                    let imm = wc.imm_data.unwrap_or(0);
                    let c = st
                        .engine
                        .handle_datagram(now, imm, &slot.bytes()[GRH_LEN..]);
                    if let Some(c) = c {
                        let keep = matches!(c.result, Ok(Reply::InFrame { .. }));
                        Self::finish(&mut st, c, keep.then_some(slot));
                        freed = true;
                    }
                }
                _ => {
                    let status = st.ring.handle_completion(wc);
                    freed = true;
                    if !wc.is_ok() {
                        self.fail(
                            &mut st,
                            Status::unavailable(format!("UD send failed: {status}")),
                        );
                    }
                }
            }
        }
        drop(batch);
        drop(st);
        if freed {
            self.wake_ready();
        }
    }

    /// Retransmits what is due and ends calls past their deadline or retry budget.
    fn on_timer(&self, now: Instant) {
        let mut st = lock(&self.state);
        let State { engine, ring, .. } = &mut *st;
        let dest = &self.dest;
        engine.handle_timeout(now, |slot, t| {
            // A refused post (a full send queue) is a lost datagram: the next
            // timeout retries, and the deadline or retry budget bounds it.
            if let Err(e) = ring.post(slot, t.len, t.imm, dest) {
                tracing::debug!(error = %e, "UD retransmission not posted");
            }
        });
        let mut ended = false;
        while let Some(c) = st.engine.poll_completion() {
            Self::finish(&mut st, c, None);
            ended = true;
        }
        drop(st);
        if ended {
            self.wake_ready();
        }
    }
}

/// The driver: reaps the CQ and runs the retransmission timer.
async fn drive(conn: Arc<Conn>) {
    let mut wcs = [WorkCompletion::default(); 64];
    let mut waiter = poll::Waiter::default();
    loop {
        if conn.closing.load(Ordering::Acquire) {
            return;
        }
        let next = {
            let mut st = lock(&conn.state);
            if st.engine.dead().is_some() {
                return;
            }
            st.armed = st.engine.poll_timeout();
            st.armed
        };
        let timer = async {
            match next {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = waiter.wait(&conn.cq, conn.mode, &mut wcs, &conn.kick) => match r {
                Ok(0) => {}
                Ok(n) => conn.handle(&wcs[..n]),
                Err(e) => {
                    let mut st = lock(&conn.state);
                    conn.fail(&mut st, Status::unavailable(format!("completion queue failed: {e}")));
                    return;
                }
            },
            () = timer => conn.on_timer(Instant::now()),
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
        () = conn.shutdown.notified() => {}
    }
}

/// Owned by all clones of a UD channel; ends the session when the last goes.
struct Handle {
    conn: Arc<Conn>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.conn.closing.store(true, Ordering::Release);
        self.conn.shutdown.notify_one();
        let mut st = lock(&self.conn.state);
        self.conn.fail(&mut st, Status::cancelled("channel closed"));
    }
}

/// A UD session; clones share it.
pub(crate) struct UdChannel {
    inner: Arc<Handle>,
    reserved: bool,
}

impl Clone for UdChannel {
    fn clone(&self) -> Self {
        UdChannel {
            inner: self.inner.clone(),
            reserved: false,
        }
    }
}

impl UdChannel {
    pub(crate) fn stats(&self) -> UdClientStats {
        lock(&self.inner.conn.state).engine.stats()
    }

    /// The largest datagram (UD header included) of this session.
    pub(crate) fn datagram(&self) -> usize {
        lock(&self.inner.conn.state).engine.config().datagram
    }

    fn try_reserve(&mut self) -> Option<Result<(), Status>> {
        let conn = &self.inner.conn;
        let mut st = lock(&conn.state);
        if let Some(s) = st.engine.dead() {
            return Some(Err(s.clone()));
        }
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
            st.engine.unreserve();
            drop(st);
            conn.wake_ready();
        }
    }

    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        if self.reserved {
            return Poll::Ready(Ok(()));
        }
        let conn = self.inner.conn.clone();
        conn.ready.poll_reserve(cx, || self.try_reserve())
    }

    pub(crate) fn call<M: Message + Send + 'static>(
        &mut self,
        call: OutgoingCall<M>,
    ) -> BoxFuture<IncomingReply> {
        if !self.reserved {
            return Box::pin(async { Err(Status::internal("Channel::call without poll_ready")) });
        }
        let handle = self.inner.clone();
        let conn = &handle.conn;
        let need = call.message.encoded_len();
        let room = lock(&conn.state)
            .engine
            .config()
            .body_room(call.path, call.metadata.encoded_len());
        if need > room && conn.accepts_rc {
            // Too big for a datagram: over RC, opened on first need.
            self.unreserve();
            return Box::pin(async move {
                let conn = &handle.conn;
                let rc = conn
                    .rc
                    .get_or_try_init(|| client::connect(&conn.endpoint))
                    .await
                    .map_err(|e| Status::unavailable(format!("RC fallback: {e}")))?;
                let mut rc = rc.clone();
                ServiceExt::<OutgoingCall<M>>::ready(&mut rc).await?;
                rc.call(call).await
            });
        }
        self.reserved = false;
        let timeout = call.timeout.or(conn.default_timeout);
        let (tx, rx) = oneshot::channel();
        let now = Instant::now();
        let started = {
            let mut st = lock(&conn.state);
            st.reserved_slots -= 1;
            let slot = st.ring.acquire().expect("reserved by poll_ready");
            let State { engine, ring, .. } = &mut *st;
            let buf = ring.buf(&slot);
            match engine.start_call(
                now,
                tx,
                slot,
                call.path,
                &call.metadata,
                timeout,
                &call.message,
                buf,
            ) {
                Ok((id, t)) => {
                    // The engine holds the slot; post it from there. A refused post
                    // is a lost datagram, which the retransmission timer covers.
                    if let Err(e) = post_new(&mut st, &conn.dest, id, t) {
                        tracing::debug!(error = %e, "UD request not posted");
                    }
                    let rto_due = now + st.engine.rto();
                    if st.armed.is_none_or(|a| a > rto_due) {
                        conn.kick.notify_one();
                    }
                    Ok(id)
                }
                Err((s, _tx, slot)) => {
                    st.ring.release(slot);
                    Err(s)
                }
            }
        };
        match started {
            Ok(id) => Box::pin(
                CallGuard {
                    handle,
                    id,
                    armed: true,
                }
                .wait(rx),
            ),
            Err(s) => {
                conn.wake_ready();
                Box::pin(async move { Err(s) })
            }
        }
    }
}

/// Posts a just-started call's datagram from the slot the engine now holds.
fn post_new(
    st: &mut State,
    dest: &UdDestination,
    id: u32,
    t: crate::engine::Transmit,
) -> rpc_transport::Result<()> {
    let State { engine, ring, .. } = st;
    let mut r = Ok(());
    engine.with_slot(id, |slot| r = ring.post(slot, t.len, t.imm, dest));
    r
}

impl Drop for UdChannel {
    fn drop(&mut self) {
        self.unreserve();
    }
}

/// Forgets its call in the engine when dropped before the reply came.
struct CallGuard {
    handle: Arc<Handle>,
    id: u32,
    armed: bool,
}

impl CallGuard {
    async fn wait(
        mut self,
        rx: oneshot::Receiver<Result<IncomingReply, Status>>,
    ) -> Result<IncomingReply, Status> {
        // Deadlines are the engine's (it ends the call at the deadline).
        let r = rx.await;
        self.armed = false;
        r.unwrap_or_else(|_| Err(Status::unavailable("connection closed")))
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.armed {
            let conn = &self.handle.conn;
            let mut st = lock(&conn.state);
            if let Some(slot) = st.engine.cancel(self.id) {
                st.ring.release(slot);
            }
            drop(st);
            conn.wake_ready();
        }
    }
}
