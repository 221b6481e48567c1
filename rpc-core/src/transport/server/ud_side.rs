//! The server's UD side: one UD QP beside the SRQ, its own receive pool and CQ, one
//! poller task, and sessions opened over the handshake connection.
//!
//! The UD QP takes receives from **its own receive queue**, not the SRQ: UD traffic is
//! not flow-controlled, and a flood of datagrams must not consume the receives the RC
//! credit scheme counts on. A datagram that finds no receive posted is lost, which
//! the client's retransmission covers. An address handle is created once per session
//! at the handshake and cached for every reply of that session. Requests go to the
//! same services as RC calls; each reply is stored (one datagram, copied into the
//! entry's preallocated buffer) for replay to a retransmitted request. When a
//! session's TCP connection closes, its state is freed; handlers still running finish
//! and their replies are dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rpc_transport::msg::handshake::{self, Envelope};
use rpc_transport::msg::{ImmMode, RecvPool, RecvSlot, RecvTarget, UdDestination, UdSendRing};
use rpc_transport::{
    AhAttr, CompletionQueue, ProtectionDomain, QpCap, QpEndpoint, QpInitAttr, QpType, QueuePair,
    WcOpcode, WorkCompletion, GRH_LEN,
};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify, Semaphore};

use super::handler::{run_handler, run_limited, start_inline, Served};
use super::liveness::{serve_liveness, LiveSettings};
use crate::engine::ud::{UdIncoming, UdServer, UdServerConfig, UdServerStats};
use crate::handshake::{decide, Availability, Capabilities, Policy, Reject, UdPolicy, NO_UD};
use crate::id_map::IdMap;
use crate::payload::Payload;
use crate::request::ConnAddrs;
use crate::server::{ServerCall, ServerReply};
use crate::status::Status;
use crate::transport::completion::{serve_cq, CompletionMode};
use crate::transport::lock;
use crate::transport::ud_device::{datagram_limit, QKEY};
use crate::transport::Error;

/// UD settings of a server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UdSettings {
    pub(crate) window: u32,
    pub(crate) max_sessions: u32,
    pub(crate) recv_slots: u32,
    pub(crate) accept_rc: bool,
}

/// Reads a running server's UD counters (pass a clone to
/// [`Server::ud_stats`](crate::transport::Server::ud_stats)).
#[derive(Clone, Default)]
pub struct UdStatsHandle(Arc<Mutex<Weak<UdSide>>>);

impl UdStatsHandle {
    /// A handle not yet given to a server.
    pub fn new() -> Self {
        Self::default()
    }

    /// The server's UD counters and state sizes; `None` before it serves or after.
    pub fn get(&self) -> Option<UdServerStats> {
        let side = lock(&self.0).upgrade()?;
        let st = lock(&side.state);
        let mut s = st.engine.stats();
        s.sends_dropped = st.sends_dropped;
        Some(s)
    }
}

impl std::fmt::Debug for UdStatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UdStatsHandle")
    }
}

/// One open session, as the server keeps it beside the engine's state.
struct Session {
    /// Where its replies go.
    dest: UdDestination,
    /// The handshake connection's ends, copied into each call.
    addrs: ConnAddrs,
    /// `Server::concurrency_limit_per_connection`: permits for running handlers.
    limit: Option<Arc<Semaphore>>,
}

/// A request of a batch, with what its session lends it.
struct UdCall {
    inc: UdIncoming,
    slot: RecvSlot,
    addrs: ConnAddrs,
    limit: Option<Arc<Semaphore>>,
}

struct SessionsState {
    engine: UdServer,
    ring: UdSendRing,
    sessions: IdMap<u32, Session>,
    /// Where a reply is encoded when every send slot is in flight: it is still
    /// stored for replay, and the client's retransmission fetches it.
    scratch: Vec<u8>,
    sends_dropped: u64,
}

/// What the UD side takes from the server's settings.
pub(crate) struct UdSideConfig<'a> {
    pub(crate) ud: UdSettings,
    /// The server's keepalive and maximum age, for each session's liveness channel.
    pub(crate) live: LiveSettings,
    pub(crate) mode: CompletionMode,
    pub(crate) max_message: usize,
    pub(crate) inline: bool,
    pub(crate) concurrency_limit: Option<usize>,
    pub(crate) ud_stats: Option<&'a UdStatsHandle>,
}

/// The UD side of one server.
pub(crate) struct UdSide {
    state: Mutex<SessionsState>,
    qp: Arc<QueuePair>,
    pd: ProtectionDomain,
    pool: RecvPool,
    cq: Arc<CompletionQueue>,
    served: Arc<Served>,
    mode: CompletionMode,
    settings: UdSettings,
    live: LiveSettings,
    max_message: usize,
    /// Handlers start on the poller (see `Server::inline_handlers`).
    inline: bool,
    /// Permits per session (`Server::concurrency_limit_per_connection`).
    concurrency_limit: Option<usize>,
    kick: Notify,
    closing: AtomicBool,
    stop: watch::Sender<bool>,
    /// Set when the server drains: every session's client is told GOAWAY.
    goaway: watch::Sender<bool>,
}

impl UdSide {
    /// Creates the UD QP, its pool, CQ and send ring.
    pub(crate) fn new(
        pd: &ProtectionDomain,
        served: Arc<Served>,
        server: UdSideConfig<'_>,
    ) -> Result<Arc<UdSide>, Error> {
        let settings = server.ud;
        let dev = pd.device();
        if !dev.caps().ud {
            // Known before any QP: the server serves RC alone.
            return Err(Error::new(format!("{} {NO_UD}", dev.name())));
        }
        let datagram = datagram_limit(dev)?;
        let max_wr = dev.attr().max_qp_wr.max(1);
        let recv_slots = settings.recv_slots.min(max_wr);
        let send_slots = 256.min(max_wr);
        let cq = Arc::new(dev.create_cq(recv_slots + send_slots + 64)?);
        let mut init = QpInitAttr::new(QpType::Ud, &cq, &cq);
        init.cap = QpCap {
            max_send_wr: send_slots,
            max_recv_wr: recv_slots,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let qp = Arc::new(pd.create_qp(&init)?);
        qp.activate_ud(QKEY, 0)?;
        // Shared by every session: framed in this device's mode (`handshake::device`).
        let mode = ImmMode::for_caps(&dev.caps());
        let pool = RecvPool::with_mode(
            pd,
            RecvTarget::Qp(qp.clone()),
            recv_slots,
            GRH_LEN + datagram,
            None,
            mode,
        )?;
        let ring = UdSendRing::with_mode(pd, qp.clone(), send_slots, datagram, mode)?;
        let engine = UdServer::new(UdServerConfig {
            window: settings.window,
            // The payload: in header mode, without the immediate's 4 bytes.
            datagram: ring.slot_size(),
            max_sessions: settings.max_sessions,
        });
        let side = Arc::new(UdSide {
            state: Mutex::new(SessionsState {
                engine,
                ring,
                sessions: IdMap::default(),
                scratch: vec![0; datagram],
                sends_dropped: 0,
            }),
            qp,
            pd: pd.clone(),
            pool,
            cq,
            served,
            mode: server.mode,
            settings,
            live: server.live,
            max_message: server.max_message,
            inline: server.inline,
            concurrency_limit: server.concurrency_limit,
            kick: Notify::new(),
            closing: AtomicBool::new(false),
            stop: watch::channel(false).0,
            goaway: watch::channel(false).0,
        });
        if let Some(h) = server.ud_stats {
            *lock(&h.0) = Arc::downgrade(&side);
        }
        tracing::info!(
            qpn = side.qp.qp_num(),
            datagram,
            window = settings.window,
            max_sessions = settings.max_sessions,
            "UD sessions served"
        );
        Ok(side)
    }

    /// Stops the poller and closes every session's connection (clients see
    /// `UNAVAILABLE`).
    /// Tells every session's client GOAWAY (the server drains).
    pub(crate) fn goaway(&self) {
        let _ = self.goaway.send(true);
    }

    /// Whether every session has closed (its client let go after GOAWAY).
    pub(crate) fn idle(&self) -> bool {
        lock(&self.state).sessions.is_empty()
    }

    pub(crate) fn stop(&self) {
        self.closing.store(true, Ordering::Release);
        self.kick.notify_one();
        let _ = self.stop.send(true);
    }

    /// The poller: the UD QP's receives and sends.
    pub(crate) async fn run(self: Arc<Self>) {
        let mut calls = Vec::with_capacity(64);
        serve_cq(
            &self.cq,
            self.mode,
            &self.kick,
            &self.closing,
            "UD",
            |wcs| self.handle(wcs, &mut calls),
        )
        .await;
    }

    /// Handles a batch; requests collect in `calls` and run once the state lock is
    /// released (a handler that answers at once takes it to store its reply).
    fn handle(self: &Arc<Self>, wcs: &[WorkCompletion], calls: &mut Vec<UdCall>) {
        let now = Instant::now();
        let batch = self.pool.batch();
        let mut st = lock(&self.state);
        for wc in wcs {
            match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => {
                    let Ok(slot) = self.pool.complete(wc) else {
                        continue;
                    };
                    if slot.len() < GRH_LEN {
                        continue;
                    }
                    let imm = slot.imm().unwrap_or(0);
                    let inc =
                        st.engine
                            .handle_datagram(now, wc.src_qp, imm, &slot.bytes()[GRH_LEN..]);
                    if let Some(inc) = inc {
                        let (addrs, limit) = match st.sessions.get(&inc.session) {
                            Some(s) => (s.addrs.clone(), s.limit.clone()),
                            None => (ConnAddrs::default(), None),
                        };
                        calls.push(UdCall {
                            inc,
                            slot,
                            addrs,
                            limit,
                        });
                    }
                }
                _ => {
                    st.ring.handle_completion(wc);
                }
            }
        }
        // Receives back before answers leave (a datagram that finds none is lost).
        drop(batch);
        Self::pump(&mut st);
        drop(st);
        for call in calls.drain(..) {
            self.dispatch(call);
        }
    }

    /// Sends queued replays and `IN_PROGRESS` answers while send slots last (beyond:
    /// dropped, like any lost datagram).
    fn pump(st: &mut SessionsState) {
        while st.engine.wants_transmit() {
            let Some(slot) = st.ring.acquire() else {
                let mut scratch = std::mem::take(&mut st.scratch);
                while st.engine.poll_transmit(&mut scratch).is_some() {
                    st.sends_dropped += 1;
                }
                st.scratch = scratch;
                return;
            };
            let SessionsState {
                engine,
                ring,
                sessions,
                ..
            } = st;
            if let Some((session, t)) = engine.poll_transmit(ring.buf(&slot)) {
                if let Some(s) = sessions.get(&session) {
                    if let Err(e) = ring.post(&slot, t.len, t.imm, &s.dest) {
                        tracing::debug!(error = %e, "UD post failed");
                    }
                }
            }
            st.ring.release(slot);
        }
    }

    fn dispatch(self: &Arc<Self>, call: UdCall) {
        let UdCall {
            inc,
            slot,
            addrs,
            limit,
        } = call;
        let UdIncoming {
            session,
            id,
            path,
            body,
            metadata,
            timeout,
        } = inc;
        let n = slot.len();
        let payload = Payload::from_slot(slot, GRH_LEN..n);
        let call = ServerCall::received(payload, path, body, metadata, timeout, addrs);
        let fut = run_call(self.clone(), session, id, call, timeout, limit);
        if let Some(fut) = start_inline(fut, self.inline) {
            tokio::spawn(fut);
        }
    }

    fn respond(&self, session: u32, id: u32, result: Result<ServerReply, Status>) {
        let parts = super::handler::unary_parts(result);
        let r = parts
            .as_ref()
            .map(|(m, msg)| (m, &**msg))
            .map_err(Clone::clone);
        let mut st = lock(&self.state);
        let SessionsState {
            engine,
            ring,
            sessions,
            scratch,
            sends_dropped,
        } = &mut *st;
        match ring.acquire() {
            Some(slot) => {
                if let Some(t) = engine.respond(session, id, r, ring.buf(&slot)) {
                    if let Some(s) = sessions.get(&session) {
                        if let Err(e) = ring.post(&slot, t.len, t.imm, &s.dest) {
                            tracing::debug!(error = %e, "UD post failed");
                        }
                    }
                }
                ring.release(slot);
            }
            None => {
                if engine.respond(session, id, r, scratch).is_some() {
                    *sends_dropped += 1;
                }
            }
        }
    }

    /// The server half of a UD session's handshake (its hello already read), then
    /// the liveness watch: the session lives exactly as long as the connection.
    pub(crate) async fn accept(
        self: Arc<Self>,
        mut tcp: TcpStream,
        hello: Envelope,
        addrs: ConnAddrs,
    ) -> Result<(), Error> {
        let ah = Arc::new(self.pd.create_ah(&AhAttr::from_endpoint(
            &hello.endpoint,
            self.pd.device().preferred_gid_index(),
        ))?);
        // Decided, opened in the engine and given its record under one lock, so
        // the session records count the open sessions exactly.
        let opened = {
            let mut st = lock(&self.state);
            let policy = Policy {
                rc: None,
                ud: Some(UdPolicy {
                    window: self.settings.window,
                    datagram: st.engine.config().datagram as u32,
                    max_sessions: self.settings.max_sessions,
                    qkey: QKEY,
                    accepts_rc: self.settings.accept_rc,
                }),
                max_message: self.max_message as u64,
                capabilities: Capabilities::SUPPORTED,
                device: Some(self.pd.device().caps()),
            };
            let now = Availability {
                receive_credits_free: 0,
                ud_sessions_open: st.sessions.len() as u32,
            };
            decide(&hello.payload, &policy, &now)
                .into_ud()
                .and_then(|(ask, mut grant)| {
                    let qpn = hello.endpoint.qpn;
                    grant.session = st
                        .engine
                        .open_session(qpn, grant.datagram as usize)
                        .map_err(|_| Reject::SessionLimit {
                            limit: self.settings.max_sessions,
                        })?;
                    let dest = UdDestination {
                        ah,
                        qpn,
                        qkey: ask.qkey,
                    };
                    let limit = self.concurrency_limit.map(|n| Arc::new(Semaphore::new(n)));
                    let s = Session { dest, addrs, limit };
                    st.sessions.insert(grant.session, s);
                    Ok(grant)
                })
        };
        let grant = match opened {
            Ok(g) => g,
            Err(no) => {
                handshake::send(&mut tcp, &QpEndpoint::default(), &no.encode()).await?;
                return Err(Error::new(no.to_string()));
            }
        };
        let session = grant.session;
        let close = |side: &UdSide| {
            let mut st = lock(&side.state);
            st.engine.close_session(session);
            st.sessions.remove(&session);
        };
        let sent = async {
            let endpoint = self.qp.endpoint_via(0, tcp.local_addr()?.ip())?;
            handshake::send(&mut tcp, &endpoint, &grant.encode()).await?;
            Ok::<_, Error>(())
        };
        if let Err(e) = sent.await {
            close(&self);
            return Err(e);
        }
        tracing::debug!(session, qpn = hello.endpoint.qpn, "UD session opened");
        let (mut goaway, mut stop) = (self.goaway.subscribe(), self.stop.subscribe());
        // (The guards `wait_for` returns are dropped inside: not held across awaits.)
        let goaway = async move { drop(goaway.wait_for(|g| *g).await) };
        let stop = async move { drop(stop.wait_for(|s| *s).await) };
        serve_liveness(tcp, self.live, goaway, stop).await;
        close(&self);
        tracing::debug!(session, "UD session closed");
        Ok(())
    }
}

/// Runs one UD call and stores and sends its reply.
async fn run_call(
    side: Arc<UdSide>,
    session: u32,
    id: u32,
    call: Result<ServerCall, Status>,
    timeout: Option<Duration>,
    limit: Option<Arc<Semaphore>>,
) {
    let result = match limit {
        None => run_handler(&side.served, call, timeout).await,
        // Boxed: see `run_limited`.
        Some(limit) => Box::pin(run_limited(&side.served, call, timeout, &limit)).await,
    };
    side.respond(session, id, result);
}
