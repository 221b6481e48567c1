//! One server-side connection: its engine, its send slots, and answering calls.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpc_transport::msg::{PooledRegion, Reader, RecvSlot, RegionPool, SendRing, SendSlot};
use rpc_transport::WorkCompletion;
use tokio::sync::{Notify, Semaphore};
use tokio::task::AbortHandle;

use super::credit_pool::PeerCredit;
use super::handler::{run_handler, run_limited, start_inline, Served};
use super::stream_inbound::InboundShared;
use crate::engine::gather::ByRef;
use crate::engine::wire::Descriptor;
use crate::engine::{Incoming, ReadOnce, RequestBody, ServerConn, Transmit};
use crate::id_map::IdMap;
use crate::payload::Payload;
use crate::request::ConnAddrs;
use crate::server::{ServerCall, ServerReply};
use crate::status::Status;
use crate::transport::lend_windows::{LendRefusal, LendWindows, Lent};
use crate::transport::lock;
use crate::transport::rendezvous::{pool_refusal, read_failed, start_gather};

mod gather;
mod waiting;

use waiting::WaitingAnswers;

pub(crate) struct RcPeerState {
    pub(super) engine: ServerConn,
    pub(super) ring: SendRing,
    pub(super) dead: bool,
    /// Handlers still running, so that a client's CANCEL or death stops them (one
    /// map entry per call: the price of not running abandoned work to the end).
    pub(super) running: IdMap<u32, AbortHandle>,
    /// Streaming calls' inbound halves, by call id (see `rc_stream.rs`).
    pub(super) streams: IdMap<u32, Arc<InboundShared>>,
    /// Bodies by reference, when both sides agreed on RDMA Read.
    rdv: Option<PeerRendezvous>,
    /// Small unary answers waiting for a send slot (see `waiting.rs`).
    waiting: WaitingAnswers,
}

/// A connection's bodies by reference: the Reads of its requests and the response
/// regions it lent.
struct PeerRendezvous {
    /// Regions for responses (the reader has its own for requests).
    lend_pool: RegionPool,
    reader: Reader,
    /// Wakes the server's read pump when the pool has room for a Read that waits.
    waker: std::task::Waker,
    /// Response regions lent, by call id, until the client's `RDONE` or `CANCEL`.
    lent: IdMap<u32, Lent>,
    /// Stream message regions lent, by address, until the client's `RDONE`.
    lent_msgs: IdMap<u64, Lent>,
    /// What exposes the regions lent to the client (a window per body, or none).
    windows: LendWindows,
}

impl RcPeerState {
    /// Posts what the engine wrote into `slot`, or gives the slot back if it wrote
    /// nothing (the call had ended); a refused post ends the connection.
    pub(super) fn post_or_release(&mut self, slot: SendSlot, t: Option<Transmit>) {
        match t {
            Some(t) => {
                if let Err(e) = self.ring.post(slot, t.len, t.imm) {
                    tracing::debug!(error = %e, "server post failed; dropping connection");
                    self.dead = true;
                }
            }
            None => self.ring.release(slot),
        }
    }

    /// Keeps a stream message's region lent until the client's `RDONE` names it.
    pub(super) fn lend_message(&mut self, lent: Lent) {
        if let Some(rdv) = &mut self.rdv {
            rdv.lent_msgs.insert(lent.addr(), lent);
        }
    }

    /// Exposes `region[..len]` to the client (binding its window before the frame
    /// that names it is posted); the rkey for the descriptor. `NoRoom` gives the
    /// region back to try again after a send completion; a broken QP ends the
    /// connection.
    pub(super) fn lend(
        &mut self,
        region: PooledRegion,
        len: usize,
    ) -> Result<(u32, Lent), Option<PooledRegion>> {
        let Some(rdv) = &mut self.rdv else {
            return Err(None);
        };
        match rdv.windows.lend(region, len) {
            Ok(x) => Ok(x),
            Err(LendRefusal::NoRoom(r)) => Err(Some(r)),
            Err(LendRefusal::Broken(why)) => {
                tracing::debug!(%why, "server cannot lend; dropping connection");
                self.dead = true;
                Err(None)
            }
        }
    }

    /// The client is done with `lent` (or it was never announced): its window is
    /// invalidated, then the region is free.
    pub(super) fn unlend(&mut self, lent: Lent) {
        if let Some(rdv) = &mut self.rdv {
            if let Err(why) = rdv.windows.release(lent) {
                tracing::debug!(%why, "dropping connection");
                self.dead = true;
            }
        }
    }
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
    /// Responses longer than this go by reference (`None`: never); read without
    /// the lock, so a small reply pays one comparison.
    pub(super) by_ref_above: Option<usize>,
}

impl RcPeer {
    pub(crate) fn new(
        engine: ServerConn,
        ring: SendRing,
        addrs: ConnAddrs,
        limit: Option<usize>,
        credit: PeerCredit,
        reads: Option<(Reader, RegionPool, std::task::Waker, LendWindows)>,
    ) -> RcPeer {
        let by_ref_above = reads.as_ref().and(engine.rendezvous());
        RcPeer {
            by_ref_above,
            state: Mutex::new(RcPeerState {
                engine,
                ring,
                dead: false,
                running: IdMap::default(),
                streams: IdMap::default(),
                waiting: WaitingAnswers::default(),
                rdv: reads.map(|(reader, lend_pool, waker, windows)| PeerRendezvous {
                    lend_pool,
                    reader,
                    waker,
                    lent: IdMap::default(),
                    lent_msgs: IdMap::default(),
                    windows,
                }),
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
        st.waiting.clear();
        for (_, s) in st.streams.drain() {
            s.end(Err(Status::unavailable(
                "the connection to the client was lost",
            )));
        }
        if let Some(rdv) = &mut st.rdv {
            // Regions lent or read into come back to the server's pool.
            rdv.lent.clear();
            rdv.lent_msgs.clear();
            rdv.windows.clear();
            rdv.reader.abandon();
        }
        drop(st);
        self.slot_wait.notify_waiters();
    }

    /// Posts queued protocol answers, then answers waiting for a slot, while send
    /// slots last.
    pub(super) fn pump(st: &mut RcPeerState) {
        while !st.dead && st.engine.wants_transmit() {
            let Some(slot) = st.ring.acquire() else {
                // The next send completion of this connection pumps again.
                return;
            };
            let RcPeerState { engine, ring, .. } = &mut *st;
            let Some(t) = engine.poll_transmit(ring.buf(&slot)) else {
                st.ring.release(slot);
                break;
            };
            if let Err(e) = st.ring.post(slot, t.len, t.imm) {
                tracing::debug!(error = %e, "server post failed; dropping connection");
                st.dead = true;
            }
        }
        Self::post_waiting(st);
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

    /// A send completion of this connection (a send slot's, or a Read's, which may
    /// complete calls to run).
    pub(crate) fn on_send_completion(self: &Arc<Self>, wc: &WorkCompletion) -> Vec<Dispatch> {
        let mut st = lock(&self.state);
        if LendWindows::owns(wc) {
            let r = st.rdv.as_mut().map(|rdv| rdv.windows.on_completion(wc));
            let wake = match r {
                Some(Err(why)) => {
                    tracing::debug!(%why, "dropping connection");
                    st.dead = true;
                    true
                }
                Some(Ok(room_back)) => room_back,
                None => false,
            };
            drop(st);
            if wake {
                // A body waiting for window room may go now (or learn the end).
                self.slot_wait.notify_waiters();
            }
            return Vec::new();
        }
        if Reader::owns(wc) {
            if let Some(rdv) = &mut st.rdv {
                rdv.reader.handle_completion(wc);
            }
            let calls = self.drive_reads(&mut st);
            // Stream messages read may be delivered (and their `RDONE`s sent).
            self.route_stream_events(&mut st);
            return calls;
        }
        st.ring.handle_completion(wc);
        if !wc.is_ok() {
            st.dead = true;
        }
        Self::pump(&mut st);
        drop(st);
        self.slot_wait.notify_waiters();
        Vec::new()
    }

    /// Starts the Reads of requests by reference that waited for pool room, and
    /// returns the calls whose Reads completed.
    pub(super) fn pump_reads(self: &Arc<Self>) -> Vec<Dispatch> {
        let mut st = lock(&self.state);
        let calls = self.drive_reads(&mut st);
        self.route_stream_events(&mut st);
        calls
    }

    /// Frees the response regions the client is done with, posts Reads while the
    /// pool has room, and hands each finished Read to the engine: a request to
    /// dispatch, or an error to answer. A Read that failed (the client's
    /// descriptor named memory it did not lend: `REM_ACCESS_ERR`) left the QP in
    /// error: the connection is closed; other connections are untouched.
    fn drive_reads(self: &Arc<Self>, st: &mut RcPeerState) -> Vec<Dispatch> {
        let mut calls = Vec::new();
        let Some(rdv) = &mut st.rdv else {
            return calls;
        };
        let mut unlent = Vec::new();
        while let Some(id) = st.engine.poll_released() {
            unlent.extend(rdv.lent.remove(&id));
        }
        while let Some(addr) = st.engine.poll_released_message() {
            unlent.extend(rdv.lent_msgs.remove(&addr));
        }
        for l in unlent {
            st.unlend(l);
        }
        let Some(rdv) = &mut st.rdv else {
            return calls;
        };
        if st.dead {
            return calls;
        }
        let mut broken = rdv
            .reader
            .pump(&mut std::task::Context::from_waker(&rdv.waker))
            .err()
            .map(|e| e.to_string());
        let mut done = Vec::new();
        while let Some(d) = rdv.reader.poll_done() {
            done.push(d);
        }
        for (id, r) in done {
            let r = r.map_err(|e| {
                let s = read_failed("request", e);
                if s.code() == crate::Code::Unavailable {
                    broken.get_or_insert_with(|| s.message().to_string());
                }
                s
            });
            if let Some(inc) = st.engine.handle_read_done(id, r) {
                calls.push(self.dispatch(st, inc, None));
            }
        }
        if let Some(why) = broken {
            tracing::warn!(%why, "closing the connection");
            st.dead = true;
            self.shutdown.notify_one();
        }
        calls
    }

    /// A received frame of this connection; a complete request comes back to be
    /// dispatched once the caller has let go of its locks.
    pub(crate) fn on_frame(
        self: &Arc<Self>,
        now: &ReadOnce,
        imm: u32,
        slot: RecvSlot,
    ) -> Option<Dispatch> {
        let mut st = lock(&self.state);
        if st.dead {
            return None;
        }
        let inc = st.engine.handle_frame(now, imm, slot.bytes());
        let state = &mut *st;
        if let Some(rdv) = state
            .rdv
            .as_mut()
            .filter(|_| state.engine.rendezvous_pending())
        {
            while let Some(op) = state.engine.poll_read() {
                let d = op.desc;
                // The head (path, metadata) goes to the region's head: one buffer.
                let head = &slot.bytes()[..op.head_len];
                match &op.gather {
                    Some(g) => start_gather(&mut rdv.reader, op.id, head, g),
                    None => rdv.reader.start(op.id, d.addr, d.rkey, d.len, head),
                }
            }
            let calls = self.drive_reads(state);
            // Only a Read's completion completes a read (a refusal answers the call).
            debug_assert!(calls.is_empty(), "a read ended without its completion");
        }
        self.settle_credit(&mut st);
        Self::pump(&mut st);
        while let Some(id) = st.engine.poll_cancelled() {
            if let Some(h) = st.running.remove(&id) {
                h.abort();
            }
        }
        self.route_stream_events(&mut st);
        inc.map(|inc| self.dispatch(&mut st, inc, Some(slot)))
    }

    /// A complete request, ready to run; `slot` is the frame it is in, if the
    /// request is read in place.
    fn dispatch(
        self: &Arc<Self>,
        st: &mut RcPeerState,
        inc: Incoming,
        slot: Option<RecvSlot>,
    ) -> Dispatch {
        let Incoming {
            id,
            bytes,
            path,
            body,
            metadata,
            timeout,
            streaming,
        } = inc;
        let payload = match (bytes, slot) {
            (RequestBody::InFrame, Some(slot)) => {
                let n = slot.len();
                Payload::from_slot(slot, 0..n)
            }
            (RequestBody::InFrame, None) => Payload::from_vec(Vec::new()),
            (RequestBody::Owned(v), _) => Payload::from_vec(v),
            (RequestBody::Shared(b), _) => Payload::from_bytes(b),
        };
        let mut call =
            ServerCall::received(payload, path, body, metadata, timeout, self.addrs.clone());
        if streaming {
            call = call.map(|c| c.with_inbound(self.open_inbound(st, id)));
        }
        Dispatch {
            conn: self.clone(),
            id,
            call,
            timeout,
            streaming,
        }
    }

    /// A region for a response body of `len` bytes that goes by reference, taken
    /// in line with the server's other responses and reads (waiting while the pool
    /// has no room); `None` when it goes inline or in fragments.
    pub(super) async fn response_region(&self, len: usize) -> Option<Result<PooledRegion, Status>> {
        let ticket = self.by_ref_pool(len)?.request(len);
        Some(match ticket {
            Ok(t) => t
                .await
                .map_err(|e| Status::unavailable(format!("no registered memory: {e}"))),
            Err(e) => Err(pool_refusal(e)),
        })
    }

    /// [`RcPeer::response_region`] only if the pool has room now and nobody waits
    /// in its line (nothing is queued).
    pub(super) fn response_region_now(&self, len: usize) -> Option<PooledRegion> {
        self.by_ref_pool(len)?.try_take(len).ok().flatten()
    }

    /// The pool a response body of `len` bytes goes by reference from; `None` when
    /// it goes inline or in fragments.
    fn by_ref_pool(&self, len: usize) -> Option<RegionPool> {
        let st = lock(&self.state);
        let rdv = st.rdv.as_ref()?;
        (!st.dead && st.engine.response_by_ref(len)).then(|| rdv.lend_pool.clone())
    }

    /// Encodes the reply into a send slot (waiting for one if all are in flight);
    /// a body by reference first into a region of the server's pool.
    async fn respond(&self, id: u32, result: Result<ServerReply, Status>) {
        let mut parts = super::handler::unary_parts(result);
        let mut region = None;
        let len = match (&parts, self.by_ref_above) {
            (Ok((_, msg)), Some(_)) => msg.encoded_len(),
            _ => 0,
        };
        let large = self.by_ref_above.is_some_and(|t| len > t);
        let mut gathered = None;
        if large {
            // Encoding a large body (up to the max message) must not run on the
            // receive loop that started this call inline.
            super::handler::leave_inline().await;
            // Bytes it received are lent where they lie; else it is copied.
            gathered = parts
                .as_ref()
                .ok()
                .and_then(|(md, m)| self.gather(len, md, &**m));
        }
        if gathered.is_none() && large {
            match self.response_region(len).await {
                Some(Ok(mut r)) => {
                    if let Ok((_, msg)) = &parts {
                        crate::transport::encode_off::encode_off_worker(len, || {
                            msg.encode_to(&mut r.buf_mut()[..len]);
                        });
                    }
                    region = Some((r, len));
                }
                Some(Err(s)) => parts = Err(s),
                None => {}
            }
        }
        // The first try registers no waiter: a slot is free for almost every reply,
        // and registering (and then unregistering) locks the `Notify`'s list twice.
        // A try that finds none registers, then tries again before it sleeps, so a
        // slot freed in between is not missed.
        let mut armed = false;
        loop {
            let notified = self.slot_wait.notified();
            tokio::pin!(notified);
            if armed {
                notified.as_mut().enable();
            }
            {
                let mut st = lock(&self.state);
                if st.dead {
                    return;
                }
                st.running.remove(&id);
                'slot: {
                    let Some(slot) = st.ring.acquire() else {
                        if !large {
                            // Every slot is in flight (so a completion that frees
                            // one is coming): the answer waits in the queue it
                            // posts from, and this call ends here. Only a small
                            // one: it is encoded where the slot frees, the receive
                            // loop among those places.
                            st.waiting.push(id, parts);
                            return;
                        }
                        break 'slot;
                    };
                    if let (Some(g), Ok((md, _))) = (gathered.take(), &parts) {
                        if let Err((g, slot)) = st.respond_gathered(id, md, g, slot) {
                            gathered = Some(g);
                            st.ring.release(slot);
                            break 'slot;
                        }
                        Self::pump(&mut st);
                        return;
                    }
                    // The window first (posted ahead of the frame that names it).
                    let lent = match region.take().filter(|_| parts.is_ok()) {
                        Some((r, len)) => match st.lend(r, len) {
                            Ok((rkey, lent)) => Some((rkey, lent, len)),
                            Err(Some(r)) => {
                                // No window room: wait for a send completion.
                                region = Some((r, len));
                                st.ring.release(slot);
                                break 'slot;
                            }
                            Err(None) => return, // the connection is over
                        },
                        None => None,
                    };
                    let RcPeerState {
                        engine, ring, rdv, ..
                    } = &mut *st;
                    let mut unannounced = None;
                    let t = match (lent, &parts, rdv) {
                        (Some((rkey, l, len)), Ok((metadata, _)), Some(rdv)) => {
                            let desc = Descriptor {
                                addr: l.addr(),
                                rkey,
                                len: len as u32,
                            };
                            match engine.respond_by_ref(
                                id,
                                metadata,
                                ByRef::One(desc),
                                ring.buf(&slot),
                            ) {
                                Some((t, true)) => {
                                    rdv.lent.insert(id, l);
                                    Some(t)
                                }
                                // Not lent after all (or nothing to send): its window
                                // is invalidated like any other.
                                other => {
                                    unannounced = Some(l);
                                    other.map(|(t, _)| t)
                                }
                            }
                        }
                        _ => {
                            let r = parts
                                .as_ref()
                                .map(|(m, msg)| (m, &**msg))
                                .map_err(Clone::clone);
                            engine.respond(id, r, ring.buf(&slot))
                        }
                    };
                    if let Some(l) = unannounced {
                        st.unlend(l);
                    }
                    st.post_or_release(slot, t);
                    Self::pump(&mut st);
                    return;
                }
            }
            if armed {
                notified.await;
            }
            armed = true;
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
