//! The RC link: one reliable connected QP per channel, its credits and fragments.
//!
//! Callers encode their request straight into a registered send slot and post it
//! themselves while few calls are open (no hand-off on the send path); with more
//! open, the driver posts a burst of callers' requests as one list (one doorbell).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rpc_transport::msg::{
    handshake, GatherPart, Gathered, Keep, PooledRegion, Reader, RecvPool, RecvTarget, RegionPool,
    SendRing, SendSlot, Ticket,
};
use rpc_transport::{
    AccessFlags, DeviceCaps, Fabric, ProtectionDomain, QpCap, QpInitAttr, QpType, WcOpcode,
    WcStatus, WorkCompletion,
};

use super::conn::{Conn, Dial};
use super::dial::{dial, shared_device};
use super::link::{InPlace, Lend, Link, NewCall, Signals, SlotPromises};
use super::stream_shared::StreamShared;
use super::{deliver, ReplySender};
use crate::engine::gather::ByRef;
use crate::engine::wire::{Descriptor, SERVER_CREDITS};
use crate::engine::{ClientConfig, ClientConn, OnDemand, Reply};
use crate::engine::{Transmit, MIN_FRAME};
use crate::handshake::{check_rc, device, Capabilities, ClientHello, HandshakeError, RcAsk};
use crate::id_map::IdMap;
use crate::status::Status;
use crate::transport::endpoint::Endpoint;
use crate::transport::lend_windows::{lend_access, LendRefusal, LendWindows, Lent, WINDOW_WRS};
use crate::transport::rendezvous::{
    gathered_pieces, pool_refusal, read_failed, waker, READ_WRS, UNKNOWN_MAX_READ,
};
use crate::transport::Error;

/// Calls open on a connection above which a new request is left for the driver to
/// post with others. At or below it a caller posts at once: a lone call never
/// waits for a task switch. Measured with `rpc-bench` (32 B, soft provider): at 256
/// in flight batching halves the client's CPU per call.
const HOLD_ABOVE: usize = 4;

/// A client frame needs no time (deadlines are the driver's timer): no clock read.
const NO_CLOCK: OnDemand<fn() -> Instant> = OnDemand(Instant::now);

/// Receive slots the pool reposted (each returns a credit), counted by the pool's
/// repost hook without the connection's lock.
#[derive(Default)]
struct ReturnedCredits {
    returned: AtomicU32,
    /// Set while queued frames (fragments, RFRs, CANCELs) wait for credits: only
    /// then does a returned credit need the driver. Kicking it on every repost would
    /// cost a task wake-up and a futile CQ poll per call.
    starved: AtomicBool,
}

/// An RC connection's state: the engine, the send slots and the credits.
pub(crate) struct RcLink {
    pub(super) engine: ClientConn<ReplySender>,
    pub(super) ring: SendRing,
    pub(super) promised: SlotPromises,
    credits: Arc<ReturnedCredits>,
    /// The streaming calls' callers, by call id (see `stream.rs`).
    pub(super) streams: IdMap<u32, Arc<StreamShared>>,
    /// Where receives and send slots grow when the server grants credits.
    pd: ProtectionDomain,
    /// Bodies by reference, when both sides agreed on RDMA Read.
    rdv: Option<Rendezvous>,
}

/// A connection's bodies by reference: its pool, the Reads of responses, and the
/// request regions the server may still read.
struct Rendezvous {
    /// Regions for request bodies; the reader has its own for responses, so that a
    /// call waiting to send never holds memory a call in flight needs to finish.
    lend_pool: RegionPool,
    reader: Reader,
    /// Request regions lent, by call id, until the `REQ`'s answer.
    lent: IdMap<u32, Lent>,
    /// Request `Bytes` lent where they lie (`in_place`), by call id, likewise.
    lent_in_place: IdMap<u32, Gathered>,
    /// Whether requests may be lent so (soft provider, `GATHER_REQUESTS` granted).
    in_place: Option<InPlace>,
    /// Stream message regions lent, by address, until the server's `RDONE`.
    lent_msgs: IdMap<u64, Lent>,
    /// What exposes the regions lent to the server (a window per body, or none).
    windows: LendWindows,
    /// Kicks the driver when the pool has room for a read that waits.
    waker: std::task::Waker,
}

/// Connects an RC channel: the handshake, then the QP, its slots and driver.
async fn connect(ep: &Endpoint) -> Result<Arc<Conn<RcLink>>, Error> {
    let s = &ep.settings;
    let (mut tcp, addr) = dial(ep).await?;
    let dev = shared_device(ep, &tcp)?;
    let caps = dev.caps();
    let pd = dev.alloc_pd()?;
    // One CQ for sends and receives, so one poller sees everything of the connection.
    // One credit more than calls in flight: the engine keeps it for CANCEL frames.
    // Beyond the credits' receives, the server's own credits (stream frames).
    let ask = s.credits + 1;
    // Beyond the send slots, the RDMA Reads of responses by reference, and the
    // window binds and invalidations of requests lent (`lend_windows`): one of
    // each per call in flight at most, in the common case.
    let windows = caps.mw_type2;
    let window_wrs = if windows { ask.max(WINDOW_WRS) } else { 0 };
    let cq = Arc::new(dev.create_cq(2 * ask + SERVER_CREDITS + READ_WRS + window_wrs + 16)?);
    let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: ask + READ_WRS + window_wrs,
        max_recv_wr: ask + SERVER_CREDITS,
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
    })
    .with_device(caps);
    handshake::send(&mut tcp, &qp.endpoint(psn)?, &hello.encode()).await?;
    let reply = handshake::recv(&mut tcp)
        .await
        .map_err(HandshakeError::from)?;
    let grant = check_rc(&hello, &reply.payload)?;
    let credits = grant.credits;
    let slot = grant.slot_size as usize;
    // Immediates only if both devices have them; the server said what its has.
    let mode = device::imm_mode(&caps, grant.device);
    let frame = slot - mode.header_len();
    if frame < MIN_FRAME {
        return Err(Error::new(format!(
            "slot size {slot} leaves {frame} bytes per frame after the {}-byte header \
             of a device without immediate data; at least {MIN_FRAME} are needed",
            mode.header_len()
        )));
    }
    // Bodies by reference: the server reads the regions this side lends.
    let by_ref = grant.capabilities.contains(Capabilities::RDMA_READ);
    let access = if by_ref {
        AccessFlags::REMOTE_READ
    } else {
        AccessFlags::empty()
    };
    qp.connect_rc_with(&reply.endpoint, psn, access, s.rc_retry)?;

    let sig = Arc::new(Signals::default());
    let returned = Arc::new(ReturnedCredits::default());
    let hook = {
        let (sig, returned) = (sig.clone(), returned.clone());
        Box::new(move |n: u32| {
            // SeqCst pairs with `pump`: either it sees these credits or we see `starved`.
            returned.returned.fetch_add(n, Ordering::SeqCst);
            if returned.starved.load(Ordering::SeqCst) {
                sig.kick.notify_one();
            }
            sig.ready.wake_all();
        })
    };
    // Room for the window to grow into before a second region: the receives for
    // the server's stream frames are no longer reserved beyond the window until
    // the first stream (`follow_window`), but starting the pool at the bare grant
    // and doubling from there measured 25-35% fewer unary calls/s at 256 in
    // flight (rpc-bench, soft provider), so it starts where it always did.
    let pool = RecvPool::with_mode(
        &pd,
        RecvTarget::Qp(qp.clone()),
        credits + SERVER_CREDITS,
        slot,
        Some(hook),
        mode,
    )?;
    let ring = SendRing::with_mode(&pd, qp.clone(), credits, slot, mode)?;
    let mut engine = ClientConn::new(ClientConfig {
        credits,
        frame_size: frame,
        max_send_message: s.max_message.min(grant.max_message as usize),
        max_recv_message: s.max_message,
    });
    if grant.capabilities.contains(Capabilities::CREDIT_WINDOWS) {
        // Receives and send slots start at the granted window and follow it.
        engine = engine.with_credit_windows(ask);
    }
    engine = engine.with_stream_window(s.stream_window);
    if by_ref {
        engine = engine.with_rendezvous(s.rendezvous_threshold);
    }
    let rdv = by_ref.then(|| {
        // Half for requests lent, half for responses read (see `Rendezvous`).
        // Lent regions are read through a window per body where the device has
        // them; regions read into are never read by the server.
        let half = s.rendezvous_pool_bytes / 2;
        let lend_pool = RegionPool::with_access(&pd, half, lend_access(windows));
        let read_pool = RegionPool::with_access(&pd, half, AccessFlags::LOCAL_WRITE);
        if let Some(stats) = &s.rendezvous_stats {
            stats.watch(&lend_pool);
            stats.watch(&read_pool);
        }
        let common = grant.device.map_or(caps, |d| DeviceCaps::common(&caps, &d));
        let piece = common.max_msg_size.unwrap_or(UNKNOWN_MAX_READ);
        let kick = sig.clone();
        Rendezvous {
            lend_pool,
            reader: Reader::new(qp.clone(), read_pool, piece, READ_WRS),
            lent: IdMap::default(),
            lent_in_place: IdMap::default(),
            in_place: (caps.fabric == Fabric::Soft
                && grant.capabilities.contains(Capabilities::GATHER_REQUESTS))
            .then(|| InPlace::new(pd.clone(), frame)),
            lent_msgs: IdMap::default(),
            windows: LendWindows::new(qp.clone(), windows).with_room(window_wrs),
            waker: waker(move || kick.kick.notify_one()),
        }
    });
    let mut link = RcLink {
        engine,
        ring,
        promised: SlotPromises::default(),
        credits: returned,
        streams: IdMap::default(),
        pd,
        rdv,
    };
    // A first frame at once: it proves this side's RDMA path to the server (which
    // closes connections that send none in time) and asks for the working window.
    link.engine.ask_credit();
    link.pump();
    tracing::debug!(peer = %addr, credits, slot, ?mode, "connected");
    Ok(Conn::spawn(link, sig, (pool, cq), s, tcp))
}

/// An initial PSN that differs between connections (24 bits).
fn psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ (t >> 8)) & 0x00ff_ffff
}

impl RcLink {
    /// Hands returned credits to the engine.
    fn sync_credits(&mut self) {
        let n = self.credits.returned.swap(0, Ordering::AcqRel);
        if n > 0 {
            self.engine.handle_tokens_returned(n);
        }
    }

    /// Sends what the engine has queued while credits and unpromised slots last.
    /// Frames left waiting for credits mark the connection starved, so that the
    /// repost hook kicks the driver when credits come back (a lack of slots needs no
    /// kick: send completions reach the driver anyway).
    pub(super) fn pump(&mut self) {
        loop {
            self.sync_credits();
            while self.engine.wants_transmit()
                && self.engine.free_tokens() > 0
                && self.ring.free_slots() > self.promised.count()
            {
                let slot = self.ring.acquire().expect("free slot checked");
                let Some(t) = self.engine.poll_transmit(self.ring.buf(&slot)) else {
                    self.ring.release(slot);
                    break;
                };
                if self.ring.holds() {
                    // Behind held requests: frames of a call must not overtake its REQ.
                    self.ring.hold(slot, t.len, t.imm);
                } else if let Err(e) = self.ring.post(slot, t.len, t.imm) {
                    self.fail(Status::unavailable(format!("post failed: {e}")));
                    return;
                }
            }
            let starved = self.engine.wants_transmit() && self.engine.free_tokens() <= 1;
            self.credits.starved.store(starved, Ordering::SeqCst);
            if !starved || self.credits.returned.load(Ordering::SeqCst) == 0 {
                return;
            }
            // Credits came back between the look and the flag: use them now.
        }
    }

    /// Grows the answer receives and the send slots to the window the server
    /// granted, before anything is sent on the new credits (doubling, so a growing
    /// window registers memory a few times, not once per credit).
    fn follow_window(&mut self, pool: &RecvPool) {
        let w = self.engine.window() as usize;
        let max = self.ring.qp().cap().max_send_wr as usize;
        // Receives for the window's answers, plus the server's own frames once the
        // connection streams (posted on its first stream, then granted).
        let streams = self.engine.streams();
        let server_frames = streams.receives_wanted() || streams.receives_posted_already();
        let need = w + if server_frames {
            SERVER_CREDITS as usize
        } else {
            0
        };
        let room = self.ring.qp().cap().max_recv_wr as usize;
        let recv = pool.capacity();
        if need > recv {
            // Doubling (few regions), within the receive queue, never short of need.
            let extra = recv.min(room.saturating_sub(recv)).max(need - recv);
            if let Err(e) = pool.grow(&self.pd, extra as u32) {
                // Without the receives the granted credits cannot be used safely.
                self.fail(Status::unavailable(format!("receives not grown: {e}")));
                return;
            }
        }
        if self.engine.streams().receives_wanted() && pool.capacity() >= need {
            self.engine.streams().receives_posted();
        }
        let send = self.ring.capacity();
        if w > send {
            let extra = send.max(w - send).min(max - send);
            if let Err(e) = self.ring.grow(&self.pd, extra as u32) {
                tracing::debug!(error = %e, "send ring not grown");
            }
        }
    }

    /// Bodies by reference: frees the request regions the server is done with,
    /// starts the Reads the engine asks for (in order, as the pool has room), and
    /// completes the calls whose Reads ended (their `RDONE`s go with the next pump).
    fn pump_rendezvous(&mut self) {
        let Some(rdv) = &mut self.rdv else { return };
        if !self.engine.rendezvous_pending() && !rdv.reader.has_work() {
            return;
        }
        let mut unlent = Ok(());
        while let Some(id) = self.engine.poll_released() {
            if let Some(l) = rdv.lent.remove(&id) {
                unlent = unlent.and(rdv.windows.release(l));
            }
            rdv.lent_in_place.remove(&id);
        }
        while let Some(addr) = self.engine.poll_released_message() {
            if let Some(l) = rdv.lent_msgs.remove(&addr) {
                unlent = unlent.and(rdv.windows.release(l));
            }
        }
        if let Err(why) = unlent {
            return self.fail(Status::unavailable(why));
        }
        while let Some(op) = self.engine.poll_read() {
            match &op.gather {
                Some(g) => {
                    crate::transport::rendezvous::start_gather(&mut rdv.reader, op.id, &[], g)
                }
                None => {
                    let d = op.desc;
                    rdv.reader.start(op.id, d.addr, d.rkey, d.len, &[]);
                }
            }
        }
        let posted = rdv
            .reader
            .pump(&mut std::task::Context::from_waker(&rdv.waker));
        let mut broken = posted
            .err()
            .map(|e| Status::unavailable(format!("RDMA Read not posted: {e}")));
        while let Some((id, r)) = rdv.reader.poll_done() {
            let r = r.map_err(|e| {
                let s = read_failed("response", e);
                if s.code() == crate::Code::Unavailable {
                    broken.get_or_insert_with(|| s.clone());
                }
                s
            });
            if let Some(c) = self.engine.handle_read_done(id, r) {
                deliver(c.waiter, c.result, None, 0);
            }
        }
        if let Some(s) = broken {
            // A failed Read leaves the QP in error: every other call ends too.
            self.fail(s);
        }
    }

    /// Keeps a stream message's region lent until the server's `RDONE` names it.
    pub(super) fn lend_message(&mut self, lent: Lent) {
        if let Some(rdv) = &mut self.rdv {
            rdv.lent_msgs.insert(lent.addr(), lent);
        }
    }

    /// Exposes `region[..len]` to the server: binds its window (posted before the
    /// frame that names it) and returns the descriptor and what to keep until the
    /// server is done. `Ok(Err(region))`: no window WR may be posted now, the body
    /// goes in fragments instead; `Err`: the connection failed.
    pub(super) fn lend(
        &mut self,
        region: PooledRegion,
        len: usize,
    ) -> Result<Result<(Descriptor, Lent), PooledRegion>, Status> {
        let Some(rdv) = &mut self.rdv else {
            return Ok(Err(region));
        };
        match rdv.windows.lend(region, len) {
            Ok((rkey, lent)) => {
                let desc = Descriptor {
                    addr: lent.addr(),
                    rkey,
                    len: len as u32,
                };
                Ok(Ok((desc, lent)))
            }
            Err(LendRefusal::NoRoom(region)) => Ok(Err(region)),
            Err(LendRefusal::Broken(why)) => {
                let status = Status::unavailable(why);
                self.fail(status.clone());
                Err(status)
            }
        }
    }

    /// `lent` was bound but never announced (the frame naming it was refused):
    /// its window is invalidated like any other before the region is free.
    pub(super) fn unlend(&mut self, lent: Lent) {
        if let Some(rdv) = &mut self.rdv {
            if let Err(why) = rdv.windows.release(lent) {
                self.fail(Status::unavailable(why));
            }
        }
    }

    /// Sends queued frames and the requests callers held back.
    pub(super) fn send_queued(&mut self) {
        if self.engine.dead().is_none() {
            self.pump();
            self.flush_held();
        }
    }

    /// Posts the requests callers held back (see `start`) as one list.
    fn flush_held(&mut self) {
        if self.ring.holds() {
            if let Err(e) = self.ring.uncork() {
                self.fail(Status::unavailable(format!("post failed: {e}")));
            }
        }
    }
}

impl Dial for RcLink {
    fn connect(ep: &Endpoint) -> impl Future<Output = Result<Arc<Conn<Self>>, Error>> + Send {
        connect(ep)
    }
}

impl Link for RcLink {
    fn dead(&self) -> Option<&Status> {
        self.engine.dead()
    }

    fn open_calls(&self) -> usize {
        self.engine.calls()
    }

    fn reserve(&mut self) -> bool {
        self.sync_credits();
        let engine = &mut self.engine;
        let ok = self
            .promised
            .take(self.ring.free_slots(), || engine.reserve());
        if !ok && self.engine.wants_transmit() {
            // Out of tokens: the engine may ask the server for more (a `WANT`).
            self.pump();
        }
        ok
    }

    fn reserved(&self) -> usize {
        self.promised.count()
    }

    fn unreserve(&mut self) {
        self.promised.redeem();
        if self.engine.dead().is_none() {
            self.engine.unreserve();
        }
    }

    fn by_ref_above(&self) -> Option<usize> {
        self.rdv.as_ref().and(self.engine.rendezvous())
    }

    fn in_place(&self) -> Option<InPlace> {
        self.rdv.as_ref().and_then(|r| r.in_place.clone())
    }

    fn region_for(&self, body_len: usize) -> Option<Result<Ticket, Status>> {
        let rdv = self.rdv.as_ref()?;
        if !self.engine.request_by_ref(body_len) {
            return None;
        }
        Some(rdv.lend_pool.request(body_len).map_err(pool_refusal))
    }

    fn start(
        &mut self,
        sig: &Signals,
        call: NewCall<'_>,
    ) -> Result<(u32, Option<Instant>), Status> {
        self.promised.redeem();
        if let Some(s) = self.engine.dead() {
            return Err(s.clone());
        }
        let slot = self.ring.acquire().expect("reserved by poll_ready");
        // The clock only for a call with a deadline: the engine reads `now` for
        // nothing else when a call starts.
        let now = call.head.timeout.map(|_| Instant::now());
        let clock = OnDemand(|| now.unwrap_or_else(Instant::now));
        let region = match call.region {
            Some(Lend::InPlace(g)) => {
                let started = self.start_in_place(clock, call.reply, &call.head, g, &slot);
                return self.post_started(sig, slot, started, now, call.head.timeout);
            }
            Some(Lend::Region { region, len, .. }) => Some((region, len)),
            None => None,
        };
        // The window first, posted ahead of the `REQ` that names it.
        let lent = match region {
            Some((region, len)) if self.rdv.is_some() => match self.lend(region, len) {
                Ok(Ok(lent)) => Some(lent),
                // No window WR may be posted now: the body goes in fragments.
                Ok(Err(_region)) => None,
                Err(s) => {
                    self.ring.release(slot);
                    return Err(s);
                }
            },
            _ => None,
        };
        let started = match lent {
            Some((desc, lent)) => {
                // Encoded once (before the lock, see `Conn::start`), into the
                // region the server will read.
                let r = self.engine.start_call_by_ref(
                    clock,
                    call.reply,
                    &call.head,
                    ByRef::One(desc),
                    self.ring.buf(&slot),
                );
                match (&r, &mut self.rdv) {
                    (Ok((id, _)), Some(rdv)) => {
                        rdv.lent.insert(*id, lent);
                    }
                    _ => self.unlend(lent),
                }
                r
            }
            None => self.engine.start_call(
                clock,
                call.reply,
                &call.head,
                call.body,
                self.ring.buf(&slot),
            ),
        };
        self.post_started(sig, slot, started, now, call.head.timeout)
    }

    fn cancel(&mut self, sig: &Signals, id: u32) {
        self.engine.cancel(id);
        if self.engine.wants_transmit() {
            sig.kick.notify_one();
        }
    }

    fn handle(&mut self, wcs: &[WorkCompletion], pool: &RecvPool) -> bool {
        let batch = pool.batch();
        let mut freed = false;
        for wc in wcs {
            if self.engine.dead().is_some() {
                break;
            }
            match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => match pool.complete(wc) {
                    Ok(mut slot) => {
                        let imm = slot.imm().unwrap_or(0);
                        if let Some(c) = self.engine.handle_frame(NO_CLOCK, imm, slot.bytes()) {
                            let keep = matches!(c.result, Ok(Reply::InFrame { .. }));
                            // The last call open: its caller, alone, reads the
                            // reply on its task, and its receive is reposted once
                            // the next request is out (`Conn::start`), off the
                            // reply's path. Among several calls, reposts go on
                            // as they come (one deferred repost would only add
                            // a flush to every start).
                            if self.engine.calls() == 0 {
                                slot.repost_later();
                            }
                            deliver(c.waiter, c.result, keep.then_some(slot), 0);
                        }
                    }
                    Err(status) => {
                        self.fail(qp_failed("a receive", status));
                    }
                },
                _ if LendWindows::owns(wc) => {
                    let r = self.rdv.as_mut().map(|rdv| rdv.windows.on_completion(wc));
                    if let Some(Err(why)) = r {
                        self.fail(Status::unavailable(why));
                    }
                }
                _ if Reader::owns(wc) => {
                    if let Some(rdv) = &mut self.rdv {
                        rdv.reader.handle_completion(wc);
                    }
                }
                _ => {
                    let status = self.ring.handle_completion(wc);
                    freed = true;
                    if !wc.is_ok() {
                        self.fail(qp_failed("a send", status));
                    }
                }
            }
        }
        drop(batch); // reposts now, returning credits through the hook
        self.pump_rendezvous();
        self.follow_window(pool);
        self.send_queued();
        self.route_stream_events();
        freed
    }

    fn on_kick(&mut self) {
        self.pump_rendezvous();
        self.send_queued();
        self.route_stream_events();
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.engine.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) -> bool {
        self.engine.handle_timeout(now);
        let mut ended = false;
        while let Some(c) = self.engine.poll_completion() {
            deliver(c.waiter, c.result, None, 0);
            ended = true;
        }
        // The expired calls' CANCEL frames go out now.
        self.send_queued();
        self.route_stream_events();
        ended
    }

    fn fail(&mut self, status: Status) {
        if let Some(rdv) = &mut self.rdv {
            // The QP posts nothing more: regions lent or read into come back.
            rdv.lent.clear();
            rdv.lent_in_place.clear();
            rdv.lent_msgs.clear();
            rdv.windows.clear();
            rdv.reader.abandon();
        }
        self.engine.handle_peer_lost(status);
        while let Some(c) = self.engine.poll_completion() {
            let status = c
                .result
                .err()
                .unwrap_or_else(|| Status::unavailable("connection lost"));
            let _ = c.waiter.send(Err(status));
        }
        self.route_stream_events();
    }
}

impl RcLink {
    /// Starts a call whose request's large `Bytes` are lent where they lie (`g`,
    /// registered by `in_place`): the `REQ` carries their gather list, and they
    /// stay registered until the `REQ`'s answer (or the connection's end).
    fn start_in_place(
        &mut self,
        clock: impl crate::engine::Now,
        reply: ReplySender,
        head: &crate::engine::CallHead<'_>,
        g: Gathered,
        slot: &SendSlot,
    ) -> Result<(u32, Transmit), Status> {
        let pieces = gathered_pieces(&g, |k| match k {
            Keep::Bytes(b) => b.rkey(),
            Keep::Pool(_) => unreachable!("a client's lender registers `Bytes` only"),
        });
        let r = self.engine.start_call_by_ref(
            clock,
            reply,
            head,
            ByRef::Gather(&pieces),
            self.ring.buf(slot),
        );
        drop(pieces);
        if let (Ok((id, _)), Some(rdv)) = (&r, &mut self.rdv) {
            let lent = g.parts.iter().map(|p| match p {
                GatherPart::Ref { len, .. } => *len,
                GatherPart::Inline(_) => 0,
            });
            rdv.lend_pool.record_lent_in_place(lent.sum());
            rdv.lent_in_place.insert(*id, g);
        }
        r
    }

    /// Posts a started call's `REQ` from `slot` (or holds it for the driver's next
    /// list), or gives the slot back when the start failed.
    fn post_started(
        &mut self,
        sig: &Signals,
        slot: SendSlot,
        started: Result<(u32, Transmit), Status>,
        now: Option<Instant>,
        timeout: Option<std::time::Duration>,
    ) -> Result<(u32, Option<Instant>), Status> {
        let (id, t) = match started {
            Ok(started) => started,
            Err(s) => {
                self.ring.release(slot);
                return Err(s);
            }
        };
        if self.engine.calls() > HOLD_ABOVE || self.ring.holds() {
            // Many calls in flight: the driver is busy with their replies and will
            // post this request with the others of the burst, one doorbell (one
            // `send` on the soft provider) for all, instead of one per caller.
            // The first held request of a burst kicks the driver; until it posts
            // them, later ones just join the list.
            if !self.ring.holds() {
                sig.kick.notify_one();
            }
            self.ring.hold(slot, t.len, t.imm);
        } else if let Err(e) = self.ring.post(slot, t.len, t.imm) {
            let status = Status::unavailable(format!("post failed: {e}"));
            self.fail(status.clone());
            return Err(status);
        }
        if self.engine.wants_transmit() {
            self.pump();
        }
        Ok((id, now.zip(timeout).map(|(now, t)| now + t)))
    }
}

/// The status of calls on a connection whose queue pair failed. Its work completion
/// names the verbs error (after a server dies, usually "transport retry counter
/// exceeded": nobody acknowledged); the user first reads what it means.
fn qp_failed(what: &str, wc: WcStatus) -> Status {
    Status::unavailable(format!(
        "connection to the server lost ({what} on its queue pair failed: {wc})"
    ))
}
