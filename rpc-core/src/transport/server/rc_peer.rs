//! One server-side connection: its engine, its send slots, and answering calls.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rpc_transport::msg::{RecvSlot, SendRing};
use rpc_transport::WorkCompletion;
use tokio::sync::{Notify, Semaphore};
use tokio::task::AbortHandle;

use super::credit_pool::PeerCredit;
use super::handler::{run_handler, run_limited, start_inline, Served};
use super::stream_inbound::InboundShared;
use crate::engine::{Incoming, RequestBody, ServerConn};
use crate::id_map::IdMap;
use crate::payload::Payload;
use crate::request::ConnAddrs;
use crate::server::{ServerCall, ServerReply};
use crate::status::Status;
use crate::transport::lock;

pub(crate) struct RcPeerState {
    pub(super) engine: ServerConn,
    pub(super) ring: SendRing,
    pub(super) dead: bool,
    /// Handlers still running, so that a client's CANCEL or death stops them (one
    /// map entry per call: the price of not running abandoned work to the end).
    pub(super) running: IdMap<u32, AbortHandle>,
    /// Streaming calls' inbound halves, by call id (see `rc_stream.rs`).
    pub(super) streams: IdMap<u32, Arc<InboundShared>>,
}

/// A connection as the server sees it.
pub(crate) struct RcPeer {
    pub(super) state: Mutex<RcPeerState>,
    /// Signalled when send slots come back (a reply waiting for a slot retries), and
    /// when a streaming call may send again.
    pub(super) slot_wait: Notify,
    /// Tells the liveness watcher to close the TCP connection (server shutdown).
    pub(crate) shutdown: Notify,
    /// Tells the liveness watcher to send GOAWAY (the server drains).
    pub(crate) goaway: Notify,
    /// The handshake connection's ends, copied into each call.
    addrs: ConnAddrs,
    /// `Server::concurrency_limit_per_connection`: permits for running handlers.
    limit: Option<Semaphore>,
    /// The shared receive pool this connection's credit window comes from.
    credit: PeerCredit,
}

impl RcPeer {
    pub(crate) fn new(
        engine: ServerConn,
        ring: SendRing,
        addrs: ConnAddrs,
        limit: Option<usize>,
        credit: PeerCredit,
    ) -> RcPeer {
        RcPeer {
            state: Mutex::new(RcPeerState {
                engine,
                ring,
                dead: false,
                running: IdMap::default(),
                streams: IdMap::default(),
            }),
            slot_wait: Notify::new(),
            shutdown: Notify::new(),
            goaway: Notify::new(),
            addrs,
            limit: limit.map(Semaphore::new),
            credit,
        }
    }

    /// Receives this connection holds in the shared pool (once dead, final).
    pub(crate) fn credit_reserved(&self) -> u32 {
        lock(&self.state).engine.credit().reserved
    }

    /// Whether a frame arrived on the QP: the peer proved its RDMA path.
    pub(crate) fn proven(&self) -> bool {
        lock(&self.state).engine.credit().proven()
    }

    fn settle_credit(&self, st: &mut RcPeerState) {
        self.credit.settle(&mut st.engine, &mut st.ring);
    }

    /// The peer is gone: nothing more is sent; replies of running calls are dropped.
    pub(crate) fn kill(&self) {
        let mut st = lock(&self.state);
        st.dead = true;
        for (_, h) in st.running.drain() {
            h.abort();
        }
        for (_, s) in st.streams.drain() {
            s.end(Err(Status::unavailable(
                "the connection to the client was lost",
            )));
        }
        drop(st);
        self.slot_wait.notify_waiters();
    }

    /// Posts queued answers while send slots last.
    pub(super) fn pump(st: &mut RcPeerState) {
        while !st.dead && st.engine.wants_transmit() {
            let Some(slot) = st.ring.acquire() else {
                // The next send completion of this connection pumps again.
                return;
            };
            let RcPeerState { engine, ring, .. } = &mut *st;
            let Some(t) = engine.poll_transmit(ring.buf(&slot)) else {
                st.ring.release(slot);
                return;
            };
            if let Err(e) = st.ring.post(slot, t.len, t.imm) {
                tracing::debug!(error = %e, "server post failed; dropping connection");
                st.dead = true;
            }
        }
    }

    /// Holds this connection's posts until [`RcPeer::uncork`]: the replies and
    /// protocol answers of one batch of completions go out as one post list (one
    /// doorbell; one `send` syscall on the soft provider) instead of one each.
    pub(crate) fn cork(&self) {
        lock(&self.state).ring.cork();
    }

    /// Posts what [`RcPeer::cork`] held back.
    pub(crate) fn uncork(&self) {
        let mut st = lock(&self.state);
        if let Err(e) = st.ring.uncork() {
            tracing::debug!(error = %e, "server post failed; dropping connection");
            st.dead = true;
        }
    }

    /// A send completion of this connection.
    pub(crate) fn on_send_completion(&self, wc: &WorkCompletion) {
        let mut st = lock(&self.state);
        st.ring.handle_completion(wc);
        if !wc.is_ok() {
            st.dead = true;
        }
        Self::pump(&mut st);
        drop(st);
        self.slot_wait.notify_waiters();
    }

    /// A received frame of this connection; a complete request comes back to be
    /// dispatched once the caller has let go of its locks.
    pub(crate) fn on_frame(
        self: &Arc<Self>,
        now: Instant,
        imm: u32,
        slot: RecvSlot,
    ) -> Option<Dispatch> {
        let mut st = lock(&self.state);
        if st.dead {
            return None;
        }
        let inc = st.engine.handle_frame(now, imm, slot.bytes());
        self.settle_credit(&mut st);
        Self::pump(&mut st);
        while let Some(id) = st.engine.poll_cancelled() {
            if let Some(h) = st.running.remove(&id) {
                h.abort();
            }
        }
        self.route_stream_events(&mut st);
        if let Some(inc) = inc {
            let Incoming {
                id,
                bytes,
                path,
                body,
                metadata,
                timeout,
                streaming,
            } = inc;
            let payload = match bytes {
                RequestBody::InFrame => {
                    let n = slot.len();
                    Payload::from_slot(slot, 0..n)
                }
                RequestBody::Owned(v) => Payload::from_vec(v),
            };
            let mut call =
                ServerCall::received(payload, path, body, metadata, timeout, self.addrs.clone());
            if streaming {
                call = call.map(|c| c.with_inbound(self.open_inbound(&mut st, id)));
            }
            return Some(Dispatch {
                conn: self.clone(),
                id,
                call,
                timeout,
                streaming,
            });
        }
        None
    }

    /// Encodes the reply into a send slot (waiting for one if all are in flight).
    async fn respond(&self, id: u32, result: Result<ServerReply, Status>) {
        let parts = super::handler::unary_parts(result);
        loop {
            let notified = self.slot_wait.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = lock(&self.state);
                if st.dead {
                    return;
                }
                st.running.remove(&id);
                if let Some(slot) = st.ring.acquire() {
                    let RcPeerState { engine, ring, .. } = &mut *st;
                    let r = parts
                        .as_ref()
                        .map(|(m, msg)| (m, &**msg))
                        .map_err(Clone::clone);
                    match engine.respond(id, r, ring.buf(&slot)) {
                        Some(t) => {
                            if let Err(e) = st.ring.post(slot, t.len, t.imm) {
                                tracing::debug!(error = %e, "server post failed");
                                st.dead = true;
                            }
                        }
                        None => st.ring.release(slot),
                    }
                    Self::pump(&mut st);
                    return;
                }
            }
            notified.await;
        }
    }
}

/// A complete request, ready to run.
pub(crate) struct Dispatch {
    conn: Arc<RcPeer>,
    id: u32,
    call: Result<ServerCall, Status>,
    timeout: Option<Duration>,
    streaming: bool,
}

impl Dispatch {
    /// Runs the call, inline first when `inline` (see [`start_inline`]): a handler
    /// that computes for long before its first `.await` holds up the completion task
    /// meanwhile, as eRPC's dispatch-thread handlers do; such work belongs in
    /// `spawn_blocking`, or `Server::inline_handlers(false)` spawns every call at once.
    pub(crate) fn run(self, served: &Arc<Served>, inline: bool) {
        let Dispatch {
            conn,
            id,
            call,
            timeout,
            streaming,
        } = self;
        let fut = run_call(conn.clone(), served.clone(), id, call, timeout, streaming);
        let Some(fut) = start_inline(fut, inline) else {
            return;
        };
        let mut st = lock(&conn.state);
        if st.dead {
            return; // dropping the future stops the handler
        }
        // Spawned under the lock, so the handler cannot answer (and remove its entry)
        // before the entry exists.
        let task = tokio::spawn(fut);
        st.running.insert(id, task.abort_handle());
    }
}

/// Runs one call and answers it.
async fn run_call(
    conn: Arc<RcPeer>,
    served: Arc<Served>,
    id: u32,
    call: Result<ServerCall, Status>,
    timeout: Option<Duration>,
    streaming: bool,
) {
    if streaming {
        conn.cap_stream_deadline(id, served.timeout());
    }
    let result = match &conn.limit {
        None => run_handler(&served, call, timeout).await,
        // Boxed: see `run_limited`.
        Some(limit) => Box::pin(run_limited(&served, call, timeout, limit)).await,
    };
    if streaming {
        // Boxed: unary calls' futures do not carry the stream writer's room.
        Box::pin(conn.respond_stream(id, result)).await;
    } else {
        conn.respond(id, result).await;
    }
}
