//! Queue pairs: creation, the state machine below the neutral checks, posting, and
//! the error state (flushes).

mod post;
pub(crate) mod wqe;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::access::AccessFlags;
use crate::addr::Gid;
use crate::error::{Error, Result};
use crate::event::AsyncEvent;
use crate::qp::QpCap;
use crate::qp_state::{QpAttr, QpState, QpType};
use crate::wc::{WcOpcode, WcStatus, WorkCompletion};
use crate::wr::SendOp;

use super::cq::Cq;
use super::device::{Device, MAX_INLINE, MAX_SGE, MAX_WR};
use super::helper;
use super::pd::Pd;
use super::rc::{self, RcConn};
use super::srq::Srq;
use wqe::{RecvWqe, SendQueue};

/// Attributes a QP has been given by its modifies.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Attrs {
    pub(crate) qkey: u32,
    pub(crate) access: AccessFlags,
    pub(crate) dest: Option<(SocketAddrV4, Gid)>,
    pub(crate) dest_qpn: u32,
    pub(crate) rq_psn: u32,
    pub(crate) sq_psn: u32,
    pub(crate) min_rnr_timer: u8,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
}

impl Attrs {
    fn apply(&mut self, a: &QpAttr) -> Result<()> {
        if let Some(q) = a.qkey {
            self.qkey = q;
        }
        if let Some(f) = a.access_flags {
            self.access = f;
        }
        if let Some(d) = a.dest {
            self.dest = Some(crate::soft::lid::route(&d)?);
        }
        if let Some(q) = a.dest_qp_num {
            self.dest_qpn = q & 0x00ff_ffff;
        }
        if let Some(p) = a.rq_psn {
            self.rq_psn = p & 0x00ff_ffff;
        }
        if let Some(p) = a.sq_psn {
            self.sq_psn = p & 0x00ff_ffff;
        }
        if let Some(t) = a.min_rnr_timer {
            self.min_rnr_timer = t;
        }
        if let Some(t) = a.timeout {
            self.timeout = t;
        }
        if let Some(r) = a.retry_cnt {
            self.retry_cnt = r;
        }
        if let Some(r) = a.rnr_retry {
            self.rnr_retry = r;
        }
        Ok(())
    }
}

/// Everything that changes, behind the QP's lock.
pub(crate) struct Inner {
    pub(crate) state: QpState,
    pub(crate) attr: Attrs,
    pub(crate) sq: SendQueue,
    pub(crate) rq: VecDeque<RecvWqe>,
    pub(crate) rc: Option<RcConn>,
    pub(crate) ud_buf: Vec<u8>,
    /// The GID this QP's endpoint was published with ([`Qp::source_via`]); an RC QP
    /// names itself by it to its peer.
    pub(crate) source: Option<Gid>,
}

/// A soft queue pair.
pub(crate) struct Qp {
    pub(crate) dev: Arc<Device>,
    pub(crate) pd: Arc<Pd>,
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    pub(crate) send_cq: Arc<Cq>,
    pub(crate) recv_cq: Arc<Cq>,
    pub(crate) srq: Option<Arc<Srq>>,
    pub(crate) cap: QpCap,
    sq_sig_all: bool,
    /// Mirror of `inner.state` so `state()` takes no lock.
    state: AtomicU8,
    /// Something a timer must look after (see `helper`).
    busy: AtomicBool,
    /// Output waits for the socket (`rc::output_waits`); counted in the CQs' `stalled`.
    stalled: AtomicBool,
    /// ACKs of several messages are owed (`rc::acks_owed`); counted in the CQs'
    /// `owing_acks`.
    owes_acks: AtomicBool,
    // One lock per QP: taken by the thread posting to it and by whoever makes progress
    // on it (the poller of one of its CQs, or the helper when nobody polls); in the
    // common case both are the same thread, so it is uncontended.
    pub(crate) inner: Mutex<Inner>,
}

fn state_from(v: u8) -> QpState {
    match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        _ => QpState::Err,
    }
}

/// The completion opcode of a send WQE.
pub(crate) fn wc_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm { .. } => WcOpcode::Send,
        SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
        SendOp::BindMw(_) => WcOpcode::BindMw,
        SendOp::LocalInv { .. } => WcOpcode::LocalInv,
    }
}

impl Pd {
    pub(crate) fn create_qp(
        self: &Arc<Self>,
        qp_type: QpType,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        srq: Option<&Arc<Srq>>,
        cap: &QpCap,
        sq_sig_all: bool,
    ) -> Result<Arc<Qp>> {
        if !Arc::ptr_eq(&send_cq.dev, &self.dev) || !Arc::ptr_eq(&recv_cq.dev, &self.dev) {
            return Err(Error::ProviderMismatch);
        }
        self.dev.profile.check_qp_type(qp_type)?;
        if cap.max_send_wr > MAX_WR
            || cap.max_recv_wr > MAX_WR
            || cap.max_send_sge as usize > MAX_SGE
            || cap.max_recv_sge as usize > MAX_SGE
            || cap.max_inline_data > MAX_INLINE
        {
            return Err(Error::InvalidArgument(format!(
                "QP capabilities {cap:?} exceed the device"
            )));
        }
        let qpn = self.dev.alloc_qpn();
        let qp = Arc::new(Qp {
            dev: self.dev.clone(),
            pd: self.clone(),
            qpn,
            qp_type,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            srq: srq.cloned(),
            cap: *cap,
            sq_sig_all,
            state: AtomicU8::new(QpState::Reset as u8),
            busy: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            owes_acks: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                state: QpState::Reset,
                attr: Attrs::default(),
                sq: SendQueue::new(
                    if qp_type == QpType::Rc {
                        cap.max_send_wr
                    } else {
                        0
                    },
                    cap.max_inline_data,
                ),
                rq: VecDeque::with_capacity(if srq.is_some() {
                    0
                } else {
                    cap.max_recv_wr as usize
                }),
                rc: None,
                ud_buf: Vec::new(),
                source: None,
            }),
        });
        let ud = qp_type == QpType::Ud;
        if ud {
            qp.lock().ud_buf = Vec::with_capacity(super::wire::UD_HDR_LEN + 65_536);
        }
        self.dev
            .qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(qpn, Arc::downgrade(&qp));
        send_cq.attach(&qp, ud);
        if !Arc::ptr_eq(send_cq, recv_cq) {
            recv_cq.attach(&qp, ud);
        }
        Ok(qp)
    }
}

impl Qp {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// The GID to publish for a peer that reaches this QP through local address
    /// `local`; remembered, so that an RC QP names itself to the peer by it.
    pub(crate) fn source_via(&self, local: IpAddr) -> Gid {
        let gid = self.dev.source_via(local);
        self.lock().source = Some(gid);
        gid
    }

    pub(crate) fn state(&self) -> QpState {
        let s = state_from(self.state.load(Ordering::Acquire));
        // A CQ overrun moves the QPs using it to ERR; they notice at their next progress.
        if !matches!(s, QpState::Reset | QpState::Err)
            && (self.send_cq.is_overrun() || self.recv_cq.is_overrun())
        {
            return QpState::Err;
        }
        s
    }

    pub(crate) fn cap(&self) -> QpCap {
        self.cap
    }

    pub(crate) fn set_state(&self, g: &mut Inner, s: QpState) {
        g.state = s;
        self.state.store(s as u8, Ordering::Release);
    }

    pub(crate) fn modify(&self, to: QpState, attr: &QpAttr) -> Result<()> {
        let mut g = self.lock();
        let mut attrs = g.attr;
        attrs.apply(attr)?;
        let from = g.state;
        match to {
            QpState::Reset => {
                // As at destruction: what the peer may still access is kept for it.
                self.let_go_of(g.rc.take());
                g.sq.clear();
                g.rq.clear();
                self.set_busy(false);
                self.set_stalled(false);
                self.set_owes_acks(false);
            }
            QpState::Err => {
                g.attr = attrs;
                self.enter_err(&mut g, None, false);
                self.set_busy(false);
                return Ok(());
            }
            QpState::Rtr if self.qp_type == QpType::Rc && from == QpState::Init => {
                let (addr, gid) = attrs.dest.ok_or(Error::MissingAttribute {
                    to,
                    attribute: "dest",
                })?;
                g.attr = attrs;
                let local = g.source.unwrap_or_else(|| self.dev.source_toward(addr));
                let conn = RcConn::new(self, local, addr, gid, &attrs);
                g.rc = Some(conn);
                self.set_state(&mut g, to);
                let waiting = rc::start(self, &mut g);
                self.set_busy(waiting);
                return Ok(());
            }
            QpState::Rts if self.qp_type == QpType::Rc && from == QpState::Rtr => {
                if let Some(rc) = g.rc.as_mut() {
                    rc.st.begin_sending(attrs.sq_psn, self.dev.now_ns());
                }
            }
            _ => {}
        }
        g.attr = attrs;
        self.set_state(&mut g, to);
        Ok(())
    }

    /// Ends an RC connection (`None`: none). Its peer may still copy into or out of
    /// the buffers it holds (placed Reads, lent segments): those and its socket go to
    /// the helper, kept until the peer closes its end (`held_for_peer`); a connection
    /// holding none just closes.
    fn let_go_of(&self, rc: Option<RcConn>) {
        if let Some((sock, bufs)) = rc.and_then(RcConn::into_held) {
            let fd = sock.as_raw_fd();
            for cq in self.cqs() {
                cq.unwatch(fd);
            }
            self.dev.helper.hold_for_peer(sock, bufs);
        }
    }

    /// Completes a send-queue WR.
    fn push_send(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, byte_len: u32) -> bool {
        self.send_cq.push(
            WorkCompletion {
                wr_id,
                status,
                opcode,
                byte_len,
                qp_num: self.qpn,
                ..WorkCompletion::default()
            },
            false,
        )
    }

    /// Completes a receive WR with an error or flush status.
    pub(crate) fn push_recv_error(&self, wr_id: u64, status: WcStatus) -> bool {
        self.recv_cq.push(
            WorkCompletion {
                wr_id,
                status,
                opcode: WcOpcode::Recv,
                qp_num: self.qpn,
                ..WorkCompletion::default()
            },
            false,
        )
    }

    /// Moves to ERR: the head send WQE completes with `first` (if given), every other
    /// outstanding WQE with WR_FLUSH_ERR, in order. Receives taken from an SRQ but not
    /// yet completed are flushed too; receives still in the SRQ stay there.
    pub(crate) fn enter_err(&self, g: &mut Inner, first: Option<WcStatus>, fatal: bool) {
        let was = g.state;
        self.set_state(g, QpState::Err);
        let mut first = first;
        while let Some(w) = g.sq.pop() {
            let st = first.take().unwrap_or(WcStatus::WrFlushErr);
            self.push_send(w.wr_id, st, wc_opcode(&w.op), 0);
        }
        if let Some(rc) = g.rc.as_mut() {
            if let Some(w) = rc.abort() {
                self.push_recv_error(w.wr_id, WcStatus::WrFlushErr);
            }
        }
        while let Some(w) = g.rq.pop_front() {
            self.push_recv_error(w.wr_id, WcStatus::WrFlushErr);
        }
        if was != QpState::Err {
            if fatal {
                self.dev.raise(AsyncEvent::QpFatal(self.qpn));
            }
            if self.srq.is_some() {
                self.dev.raise(AsyncEvent::QpLastWqeReached(self.qpn));
            }
        }
    }

    /// Enters ERR if one of the CQs overran.
    fn check_cqs(&self, g: &mut Inner) {
        if !matches!(g.state, QpState::Reset | QpState::Err)
            && (self.send_cq.is_overrun() || self.recv_cq.is_overrun())
        {
            self.enter_err(g, None, false);
        }
    }

    /// Makes progress; `true` if the QP wants to be visited again soon even without
    /// socket readiness (pending output, an owed ACK, a timer).
    /// `read`: also read the socket (else only timers and pending output).
    /// `budget`: bytes an RC QP may write in this pass (see `rc::WRITE_PER_POLL`).
    pub(crate) fn progress(&self, now: u64, read: bool, budget: usize) -> bool {
        let mut g = self.lock();
        self.check_cqs(&mut g);
        match self.qp_type {
            QpType::Rc => {
                let needs = rc::progress(self, &mut g, now, read, budget);
                self.after_rc_pass(&g, needs);
                needs
            }
            QpType::Ud => false,
        }
    }

    /// Records what an RC progress pass left behind.
    pub(crate) fn after_rc_pass(&self, g: &Inner, needs: bool) {
        self.set_busy(needs || g.sq.len() > 0);
        self.set_stalled(rc::output_waits(g));
        self.set_owes_acks(rc::acks_owed(g));
    }

    /// Records whether output waits for the socket. A QP that stalls while nobody
    /// makes progress through its CQs (their pollers sleep) hands the output to the
    /// helper at once, which then writes whenever the socket has room; a poller that
    /// arms its CQ later does the same (`Cq::req_notify`).
    fn set_stalled(&self, stalled: bool) {
        if self.count_in_cqs(&self.stalled, stalled, |cq| &cq.stalled)
            && stalled
            && self.neglected(self.dev.now_ns())
        {
            self.dev.helper.poke();
        }
    }

    /// Records whether ACKs of several messages are owed, for a poller about to
    /// sleep (`Cq::prepare_sleep`).
    fn set_owes_acks(&self, owes: bool) {
        self.count_in_cqs(&self.owes_acks, owes, |cq| &cq.owing_acks);
    }

    /// Sets `flag` to `on` and, if that changed it, counts the change in `count` of
    /// each of this QP's CQs; whether it changed.
    fn count_in_cqs(&self, flag: &AtomicBool, on: bool, count: fn(&Cq) -> &AtomicU32) -> bool {
        // A plain load first: this runs after every progress pass, and rarely changes.
        if flag.load(Ordering::Relaxed) == on || flag.swap(on, Ordering::SeqCst) == on {
            return false;
        }
        for cq in self.cqs() {
            if on {
                count(cq).fetch_add(1, Ordering::SeqCst);
            } else {
                count(cq).fetch_sub(1, Ordering::SeqCst);
            }
        }
        true
    }

    /// Every poller of its CQs is about to sleep or sleeps (see `Cq::asleep`): no
    /// pass will run for it until a wake-up.
    pub(crate) fn cqs_asleep(&self) -> bool {
        self.cqs().all(|cq| cq.asleep())
    }

    pub(crate) fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::Relaxed)
    }

    /// Its CQs: one, or two distinct ones.
    fn cqs(&self) -> impl Iterator<Item = &Arc<Cq>> {
        let two = !Arc::ptr_eq(&self.send_cq, &self.recv_cq);
        std::iter::once(&self.send_cq).chain(two.then_some(&self.recv_cq))
    }

    /// Nobody makes progress on it through its CQs (see `Cq::neglected`).
    pub(crate) fn neglected(&self, now: u64) -> bool {
        self.cqs().all(|cq| cq.neglected(now, helper::IDLE_NS))
    }

    /// Records whether a timer must look after this QP, telling the helper on change.
    pub(crate) fn set_busy(&self, busy: bool) {
        if self.busy.swap(busy, Ordering::SeqCst) != busy {
            self.dev.helper.set_busy(busy);
        }
    }

    pub(crate) fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Relaxed)
    }

    /// The RC connection's TCP socket, if connected.
    #[cfg(test)]
    pub(crate) fn rc_fd(&self) -> Option<RawFd> {
        let g = self.lock();
        g.rc.as_ref()
            .and_then(|rc| rc.link.as_ref())
            .map(|l| l.tcp_fd())
    }

    /// Re-arms the helper's watch of this QP's descriptors (`rearm(fd, writable)` each
    /// one: with `stalled` output on TCP, its socket is watched for room instead of
    /// input), then tells a shared-memory peer that its next publish must ring the
    /// doorbell (a full ring's room is announced through that doorbell too).
    pub(crate) fn rc_rearm(&self, stalled: bool, mut rearm: impl FnMut(RawFd, bool)) {
        let g = self.lock();
        if let Some(link) = g.rc.as_ref().and_then(|rc| rc.link.as_ref()) {
            let tcp = link.tcp_fd();
            // A pass cut at its budget goes on at once: its (idle) socket is writable.
            let room = stalled && (link.output_on_tcp() || rc::output_ready(&g));
            link.wake_fds().for_each(|fd| rearm(fd, room && fd == tcp));
            link.announce_sleep();
        }
    }

    /// Whether one of this QP's CQs was polled within `ns`.
    pub(crate) fn attended(&self, now: u64, ns: u64) -> bool {
        now.saturating_sub(self.send_cq.last_poll()) < ns
            || now.saturating_sub(self.recv_cq.last_poll()) < ns
    }

    /// Asks the pollers of this QP's CQs to come back without socket readiness.
    pub(crate) fn defer(&self) {
        self.send_cq.defer(self.qpn);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.defer(self.qpn);
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // No CQ lock is taken here: this may run inside a CQ's progress (the poller
        // held the last reference). CQs forget dead QPs at their next sweep.
        self.dev
            .qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.qpn);
        if self.busy.load(Ordering::SeqCst) {
            self.dev.helper.set_busy(false);
        }
        self.set_stalled(false);
        self.set_owes_acks(false);
        let rc = self
            .inner
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .rc
            .take();
        self.let_go_of(rc);
        if self.qp_type == QpType::Ud {
            self.send_cq.ud_detach();
            if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
                self.recv_cq.ud_detach();
            }
        }
    }
}
