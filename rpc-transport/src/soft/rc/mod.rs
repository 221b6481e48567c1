//! Reliable connected QPs over TCP: the connection, and the progress driver that runs
//! the requester and responder halves of the protocol over it.
//!
//! TCP already makes the byte stream reliable and ordered, so what remains of IB's
//! RC transport is: message sequence numbers and cumulative ACKs (send completions
//! wait for them, as on hardware), NAKs for RNR and remote errors, RNR retry with the
//! responder's timer, and the retry budget (`timeout` × (`retry_cnt` + 1)) when the
//! peer goes silent. ACKs ride on any frame going the other way; a bare ACK is sent
//! only once one has been owed for [`ACK_DELAY_NS`] (a request's reply normally
//! carries it), so a request/response exchange costs one write per message per side,
//! or for several messages at once ([`ACK_EVERY`]; [`ACKS_BEFORE_SLEEP`] when the
//! QP's pollers go to sleep).
//! The budget restarts on every frame heard; a message that takes long to arrive is
//! acknowledged along the way ([`PROGRESS_ACK_NS`]), so a slow but live receiver keeps
//! its sender's budget from running out, as per-segment ACKs do on hardware.
//!
//! Bytes: [`rx`] reads heads into a small buffer and payloads straight into their
//! destination; [`tx`] sends heads and payloads (by reference) with one `sendmsg`;
//! both go through the connection's [`link`]: the TCP stream, or shared-memory rings
//! when both ends are on one host.
//!
//! Sharing the socket: within a connection, the requester and responder halves take
//! turns at filling the one-chunk output queue; among the QPs of a CQ, each progress
//! pass reads and writes at most a MiB ([`MAX_READ_PER_PASS`], [`WRITE_PER_POLL`]), so
//! that a poll visiting every QP in turn gives each the same share.

pub(crate) mod link;
mod placed;
mod requester;
mod responder;
mod rx;
mod tx;

use std::collections::VecDeque;
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};

use crate::addr::Gid;
use crate::mr_buffer::MrBuffer;
use crate::qp_state::{ack_timeout_us, QpState};
use crate::wc::WcStatus;

use super::device::bump;
use super::helper;
use super::pieces::Pieces;
use super::qp::wqe::{RecvWqe, SendQueue, TxState};
use super::qp::{Attrs, Inner, Qp};
use super::shm::PeerWriter;
use super::wire::{self, Body, Head, Nak, WireError};
pub(crate) use link::Link;
use responder::{InMsg, Resp};
use rx::{RxBuf, Stop};
pub(crate) use tx::TxBuf;
#[cfg(test)]
pub(crate) use tx::CHUNK;

/// Wait between connection attempts.
const CONNECT_RETRY_NS: u64 = 10_000_000;
/// How long an ACK may wait for a frame to ride on before it is sent alone.
const ACK_DELAY_NS: u64 = 100_000;
/// Bytes moved in a pass (read and written) from which the pass may have lasted
/// [`ACK_DELAY_NS`]: only then does the lone-ACK check read the clock again; a
/// shorter pass uses the time it started at (a read costs about a hundred
/// instructions, and every ping-pong pass asks).
const LONG_PASS_BYTES: usize = 64 << 10;
/// Messages received without an ACK after which one goes out at once: a one-way
/// stream has no reply to ride on, and waiting `ACK_DELAY_NS` would stall a sender
/// whose window is full (64 B streaming ran at 0.05x TCP with the delay alone).
/// A ping-pong never reaches it: its one request is acknowledged by the reply.
const ACK_EVERY: u32 = 8;
/// Messages received without an ACK that a pass sends one for at once when every
/// poller of the QP's CQs is about to sleep (or sleeps: the helper's pass). Left
/// owed, the ACK waited for the helper's tick, 1 ms and more, while the peer's sends
/// stayed incomplete; a sender whose completions free its slots (a stream's writer)
/// stalled for that long (rpc-bench 64 KiB server stream: every other run at
/// 26-30 k messages/s, p99 gap 1.3 ms, against 78-100 k). One message is left owed:
/// a ping-pong's reply carries its ACK, and an ACK of its own before each sleep
/// would wake the peer once more per call.
const ACKS_BEFORE_SLEEP: u32 = 2;
/// While a message is being received, a bare ACK goes out at least this often (if
/// frames of it keep arriving): the sender's retry budget (at least
/// [`MIN_BUDGET_NS`]) restarts on every frame it hears, as a hardware requester's
/// timer restarts on every ACK of a segment. Without it, a transfer that outlasts the
/// budget (64 MiB to a peer slowed by load) fails although every byte is being taken.
const PROGRESS_ACK_NS: u64 = 100_000_000;
/// Smallest retry budget. TCP retransmits for us and a responder QP in ERR says so
/// (`NAK(QP error)`), so the budget only detects a peer that went silent (hung, or
/// its host unreachable); on a loaded machine a live peer can be descheduled for a
/// long while, which must not look like death.
const MIN_BUDGET_NS: u64 = 1_000_000_000;
/// Bytes read per progress pass at most (then ACKs and output get their turn, and
/// the next QP of the CQ).
const MAX_READ_PER_PASS: usize = 1 << 20;
/// Bytes written per progress pass of a poller (or a post) at most: a QP with a long
/// transfer leaves the socket time to the other QPs of its CQ after this much (each
/// poll visits them in turn), and the poller gets back to its completions.
pub(crate) const WRITE_PER_POLL: usize = 1 << 20;
/// The same for a pass of the helper thread. It comes back as soon as the socket has
/// room again (see `helper`), so the cap only shares its time among QPs.
pub(crate) const WRITE_PER_HELPER_PASS: usize = 1 << 20;
/// How long one connection attempt may take before it is abandoned (and retried).
const CONNECT_TIMEOUT_NS: u64 = 1_000_000_000;
/// How often a connect under way is looked at.
const CONNECT_CHECK_NS: u64 = 1_000_000;

/// Why progress stopped with the QP going to ERR.
#[derive(Debug)]
pub(crate) enum Fault {
    /// The head send WQE completes with this status.
    Send(WcStatus),
    /// The connection broke or carried garbage: the head WQE fails with
    /// RETRY_EXC_ERR and `QpFatal` is raised.
    Broken,
    /// Completions were already made; just move to ERR.
    Err,
}

/// Protocol state of both halves.
pub(crate) struct RcProtocol {
    /// The GID this QP goes by toward the peer (what its published endpoint said).
    local_gid: Gid,
    peer: SocketAddrV4,
    pub(crate) peer_gid: Gid,
    pub(crate) peer_qpn: u32,
    pub(crate) connector: bool,
    connect_at: u64,
    // Requester.
    next_seq: u32,
    acked: u32,
    rnr_until: Option<u64>,
    rnr_count: u8,
    pub(crate) progress_at: u64,
    halted: bool,
    /// When a frame was last heard from the peer, and last sent to it (device clock of
    /// the pass): a message still arriving is acknowledged as progress in between
    /// ([`PROGRESS_ACK_NS`]), but only while the peer keeps sending, so a stalled one
    /// is never kept alive by it.
    heard_at: u64,
    sent_at: u64,
    // Responder.
    expected: u32,
    acked_out: u32,
    owed_since: Option<u64>,
    in_msg: Option<InMsg>,
    /// The receive `in_msg` fills, copied here once from the RQ or SRQ (a WQE is
    /// ~270 bytes: moved through `Option`s and tuples it cost four `memcpy`s).
    in_wqe: RecvWqe,
    write_open: bool,
    resps: VecDeque<Resp>,
    failed: bool,
    /// Which half encodes first in the next round of output (they alternate, so
    /// that Read responses and requests share the connection chunk by chunk).
    resp_first: bool,
    /// The last pass stopped writing at its byte budget with more to send.
    budget_cut: bool,
    /// Reads offer their destination for the peer to place the bytes itself (the
    /// link is on shared memory and this device allows it).
    offer_place: bool,
    /// Destinations so offered, held until the peer is done with them.
    pub(crate) placing: placed::Placing,
    /// The peer answered a loan with `NAK(send the bytes)`: this connection lends no
    /// more ([`RcProtocol::lends`]).
    lend_refused: bool,
    /// Sources so lent, held until their message is acknowledged.
    pub(crate) lending: placed::Placing,
    /// Responder: a lent segment of the message `expected` could not be taken; its
    /// segments are dropped until it comes again from its first.
    resend: bool,
    /// Responder: lent bytes taken in this pass (bounded like bytes read).
    taken: usize,
}

impl RcProtocol {
    /// Whether Send and Write segments beyond a ring chunk lend their bytes for the
    /// peer to take itself: where Reads offer their destination, unless the peer
    /// refused a loan.
    fn lends(&self) -> bool {
        self.offer_place && !self.lend_refused
    }

    pub(crate) fn begin_sending(&mut self, sq_psn: u32, now: u64) {
        self.next_seq = sq_psn;
        self.acked = sq_psn;
        self.progress_at = now;
    }

    /// Forgets in-flight responder work on the way to ERR; returns a receive that a
    /// partly received message had taken, so that it can be flushed.
    pub(crate) fn abort(&mut self) -> Option<RecvWqe> {
        self.resps.clear();
        self.write_open = false;
        self.resend = false;
        self.rnr_until = None;
        self.in_msg.take().map(|_| self.in_wqe)
    }
}

impl RcConn {
    /// Requests this responder has executed (its next expected sequence number).
    #[cfg(test)]
    pub(crate) fn expected(&self) -> u32 {
        self.st.expected
    }

    /// [`RcProtocol::abort`], and the payload being received lands nowhere any more
    /// (its receive or Read WQE is about to be flushed).
    pub(crate) fn abort(&mut self) -> Option<RecvWqe> {
        self.rx.discard_current();
        self.st.abort()
    }
}

/// The RC state of a QP from RTR on.
pub(crate) struct RcConn {
    pub(crate) link: Option<Link>,
    /// The connector's TCP connect under way, and when it started.
    connecting: Option<(Socket, u64)>,
    rx: RxBuf,
    tx: TxBuf,
    pub(crate) st: RcProtocol,
}

impl RcConn {
    /// For a destroyed QP: its socket and the buffers its peer may still access
    /// (placed Reads' destinations, lent segments), if it holds any. Without a
    /// connection left to say when the peer is done, the holders keep them (their
    /// drop leaves them mapped, logged).
    pub(crate) fn into_held(mut self) -> Option<(TcpStream, Vec<Arc<MrBuffer>>)> {
        let link = self.link.take()?;
        let mut bufs: Vec<_> = self.st.placing.take_all().collect();
        bufs.extend(self.st.lending.take_all());
        (!bufs.is_empty()).then(|| (link.into_socket(), bufs))
    }

    pub(crate) fn new(
        qp: &Qp,
        local_gid: Gid,
        peer: SocketAddrV4,
        peer_gid: Gid,
        a: &Attrs,
    ) -> RcConn {
        // The side with the larger (GID, QPN) connects; the other accepts. Both
        // compare the GIDs the endpoints carried, so both reach the same answer.
        let connector = (local_gid.0, qp.qpn) > (peer_gid.0, a.dest_qpn);
        RcConn {
            link: None,
            connecting: None,
            rx: RxBuf::new(),
            tx: TxBuf::new(),
            st: RcProtocol {
                local_gid,
                peer,
                peer_gid,
                peer_qpn: a.dest_qpn,
                connector,
                connect_at: 0,
                next_seq: 0,
                acked: 0,
                rnr_until: None,
                rnr_count: 0,
                progress_at: qp.dev.now_ns(),
                halted: false,
                heard_at: 0,
                sent_at: 0,
                expected: a.rq_psn,
                acked_out: a.rq_psn,
                owed_since: None,
                in_msg: None,
                in_wqe: RecvWqe::EMPTY,
                write_open: false,
                // Empty until the peer asks for a Read or an atomic: a QP that only
                // receives Sends (every small RPC) never needs it.
                resps: VecDeque::new(),
                failed: false,
                resp_first: false,
                budget_cut: false,
                offer_place: false,
                placing: placed::Placing::default(),
                lend_refused: false,
                lending: placed::Placing::default(),
                resend: false,
                taken: 0,
            },
        }
    }
}

/// What an accepted connection's `HELLO` said about shared memory: the connecting
/// side's host identity and listener (see `link::Link::offer`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShmHint {
    pub(crate) host: u64,
    pub(crate) listener: u64,
}

/// Takes over a connected socket for this QP; the accepting side (`hint`) offers
/// shared memory if the peer is on this host.
pub(crate) fn attach(qp: &Qp, rc: &mut RcConn, link: Link, hint: Option<ShmHint>) {
    let fd = link.tcp_fd();
    let link = rc.link.insert(link);
    qp.dev.helper.watch_qp(fd, qp.qpn);
    qp.send_cq.watch(fd, qp.qpn);
    qp.recv_cq.watch(fd, qp.qpn);
    bump(&qp.dev.stats.rc_connections);
    if let Some(h) = hint {
        link.offer(qp, h.host, h.listener, rc.st.peer_qpn, rc.st.local_gid.0);
    }
}

/// A connected socket as the provider uses it (non-blocking, no Nagle).
pub(crate) fn tcp_link(sock: TcpStream) -> Link {
    let _ = sock.set_nodelay(true);
    let _ = sock.set_nonblocking(true);
    Link::tcp(sock)
}

/// Called on INIT → RTR: connect now, or claim a connection the helper parked.
///
/// Returns whether a connection attempt must be retried later.
pub(crate) fn start(qp: &Qp, g: &mut Inner) -> bool {
    let now = qp.dev.now_ns();
    let Some(rc) = g.rc.as_mut() else {
        return false;
    };
    if rc.st.connector {
        try_connect(qp, rc, now);
    } else if let Some((sock, hint)) =
        helper::claim(&qp.dev, qp.qpn, rc.st.peer_gid, rc.st.peer_qpn)
    {
        attach(qp, rc, tcp_link(sock), Some(hint));
    }
    if rc.link.is_none() {
        qp.defer();
    }
    rc.link.is_none() && rc.st.connector
}

/// Advances the connector's TCP connect without ever blocking the caller (who may
/// be a tokio thread serving other connections): the first pass starts a
/// non-blocking connect, later passes look whether it finished, and one that takes
/// longer than `CONNECT_TIMEOUT_NS` is abandoned and retried after
/// `CONNECT_RETRY_NS`.
fn try_connect(qp: &Qp, rc: &mut RcConn, now: u64) {
    let (sock, started) = match rc.connecting.take() {
        Some(c) => c,
        None => match start_connect(rc.st.peer) {
            Ok(sock) => (sock, now),
            Err(_) => {
                rc.st.connect_at = now + CONNECT_RETRY_NS;
                return;
            }
        },
    };
    match sock.take_error() {
        Ok(None) if sock.peer_addr().is_ok() => finish_connect(qp, rc, sock.into()),
        Ok(None) if now.saturating_sub(started) < CONNECT_TIMEOUT_NS => {
            rc.connecting = Some((sock, started));
            rc.st.connect_at = now + CONNECT_CHECK_NS;
        }
        // Refused, unreachable, or not through in time: try again later.
        _ => rc.st.connect_at = now + CONNECT_RETRY_NS,
    }
}

/// Starts a non-blocking connect to `peer` (it may complete at once, as loopback
/// often does, or later).
fn start_connect(peer: SocketAddrV4) -> std::io::Result<Socket> {
    let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nonblocking(true)?;
    match sock.connect(&SocketAddr::V4(peer).into()) {
        Ok(()) => Ok(sock),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(sock),
        Err(e) => Err(e),
    }
}

/// The connector's TCP connection is up: say HELLO and attach it.
fn finish_connect(qp: &Qp, rc: &mut RcConn, sock: TcpStream) {
    rc.tx.buf.clear();
    let listener = qp.dev.shm.as_ref().map_or(0, |l| l.id);
    let hello = Body::Hello {
        gid: rc.st.local_gid.0,
        src_qpn: qp.qpn,
        dst_qpn: rc.st.peer_qpn,
        host: if listener == 0 {
            0
        } else {
            super::shm::ident::host_identity()
        },
        listener,
    };
    wire::encode(&mut rc.tx.buf, 0, 0, 0, &hello, 0);
    let mut link = tcp_link(sock);
    // Send the HELLO now: the peer learns of the connection even if this QP is
    // never polled (a socket closed before its HELLO is dropped unrouted).
    let _ = rc.tx.flush(&mut link);
    attach(qp, rc, link, None);
}

/// Handler context: the QP and the parts of its state a frame may touch.
pub(crate) struct FrameContext<'a> {
    pub(crate) qp: &'a Qp,
    pub(crate) state: QpState,
    pub(crate) attr: &'a Attrs,
    pub(crate) sq: &'a mut SendQueue,
    pub(crate) rq: &'a mut VecDeque<RecvWqe>,
    pub(crate) st: &'a mut RcProtocol,
    pub(crate) tx: &'a mut TxBuf,
    pub(crate) now: u64,
    /// This side's right to copy into and out of the peer (`shm::direct`), if it has
    /// one and no copy was refused since.
    pub(crate) peer: Option<&'a PeerWriter>,
}

impl FrameContext<'_> {
    /// Appends a frame header; every frame carries the current cumulative ACK.
    pub(crate) fn frame(&mut self, flags: u8, seq: u32, body: &Body, payload_len: usize) {
        wire::encode(
            &mut self.tx.buf,
            flags,
            seq,
            self.st.expected,
            body,
            payload_len,
        );
        self.st.acked_out = self.st.expected;
        self.st.owed_since = None;
        self.st.sent_at = self.now;
    }

    /// Notes when an ACK became owed, if one is; whether the QP wants another
    /// visit for what this pass left (output, an ACK, an RNR wait, responses, WQEs
    /// not yet sent).
    fn end_pass(&mut self) -> bool {
        let owes = self.st.acked_out != self.st.expected;
        if owes && self.st.owed_since.is_none() {
            self.st.owed_since = Some(self.now);
        }
        !self.tx.is_empty()
            || owes
            || self.st.rnr_until.is_some()
            || !self.st.resps.is_empty()
            || (self.sq.tx < self.sq.len() && !self.st.halted)
    }

    fn budget_ns(&self) -> Option<u64> {
        ack_timeout_us(self.attr.timeout)
            .map(|us| (us * 1000 * (u64::from(self.attr.retry_cnt) + 1)).max(MIN_BUDGET_NS))
    }
}

/// Progress from a poll (or the helper): read, process, send. `true` if the QP wants
/// to be visited again without socket readiness.
/// `budget`: bytes it may write ([`WRITE_PER_POLL`] or [`WRITE_PER_HELPER_PASS`]).
pub(crate) fn progress(qp: &Qp, g: &mut Inner, now: u64, read: bool, budget: usize) -> bool {
    // A pass that would not read (the helper's timer pass of a QP waiting for a Read
    // response, say) reads a ring holding bytes anyway: unlike a socket, a ring wakes
    // nobody unless asked, and the request may have been spent (see `link`).
    // Frames left undecoded by a pass that took its fill of lent bytes are read too.
    let read = read
        || g.rc.as_ref().is_some_and(|rc| {
            rc.rx.holds_frames() || rc.link.as_ref().is_some_and(Link::ring_has_input)
        });
    let r = drive(qp, g, now, read, budget);
    finish(qp, g, r)
}

/// Messages received that this side has not acknowledged yet.
fn unacked(st: &RcProtocol) -> u32 {
    st.expected.wrapping_sub(st.acked_out) & wire::SEQ_MASK
}

/// Whether ACKs of enough messages are owed to be sent before every poller of the
/// QP sleeps ([`ACKS_BEFORE_SLEEP`]). Not in ERR, which sends none: a flag left
/// set would cost every sleep of its CQs a poll.
pub(crate) fn acks_owed(g: &Inner) -> bool {
    g.state != QpState::Err
        && g.rc
            .as_ref()
            .is_some_and(|rc| unacked(&rc.st) >= ACKS_BEFORE_SLEEP)
}

/// Whether output waits for the socket: the last flush found it full, or the last
/// pass stopped at its budget. Either way a writable socket is the moment to go on
/// (and only then is there anything to do, so waiting for it cannot spin).
pub(crate) fn output_waits(g: &Inner) -> bool {
    g.rc.as_ref()
        .is_some_and(|rc| rc.link.is_some() && (!rc.tx.is_empty() || rc.st.budget_cut))
}

/// Whether the last pass stopped at its byte budget with nothing left queued: its
/// output waits for a turn, not for room (placed Read responses: nothing but this side
/// moves them), so whoever watches it must come back at once. Waiting for the helper's
/// 1 ms tick instead cost a tick per MiB placed (measured: rpc-bench 4 MiB × 1 p50
/// 8.7–9.3 ms with placement and the tick, 2.9–3.1 ms with this).
pub(crate) fn output_ready(g: &Inner) -> bool {
    g.rc.as_ref()
        .is_some_and(|rc| rc.link.is_some() && rc.st.budget_cut && rc.tx.is_empty())
}

/// Progress right after a post: send what was posted, without reading. Returns
/// whether the QP wants another visit.
pub(crate) fn kick(qp: &Qp, g: &mut Inner, now: u64) -> bool {
    let r = match send_posted(qp, g, now) {
        Some(r) => r,
        None => drive(qp, g, now, false, WRITE_PER_POLL),
    };
    let needs = finish(qp, g, r);
    if needs {
        qp.defer();
    }
    needs
}

fn finish(qp: &Qp, g: &mut Inner, r: (Result<(), Fault>, bool)) -> bool {
    match r.0 {
        Ok(()) => r.1,
        Err(Fault::Send(st)) => {
            qp.enter_err(g, Some(st), false);
            true
        }
        Err(Fault::Broken) => {
            if g.state != QpState::Err {
                qp.enter_err(g, Some(WcStatus::RetryExcErr), true);
            }
            if let Some(rc) = g.rc.as_mut() {
                // The peer's end is closed (or it broke the protocol): it places
                // nothing more.
                rc.link = None;
                rc.st.placing.release_all();
                rc.st.lending.release_all();
            }
            false
        }
        Err(Fault::Err) => {
            qp.enter_err(g, None, false);
            true
        }
    }
}

/// The post's pass when that is all there is to do: on a shared-memory ring (no
/// handshake or switch under way), in RTS with nothing queued (no output waiting,
/// no response to send, no RNR wait, no pass cut short by its budget), and only
/// messages a ring chunk holds posted (no lending, which the full pass sets up).
/// The requester encodes them, with the ACK this side owes, and the ring takes
/// them; the rest of a pass (completions, timers, the responder, the peer's watch)
/// waits for the next poll, which a post would not have found to do anyway.
/// `None`: not such a post; run the whole pass.
///
/// A small call's post is half of its side's progress passes, and this one costs
/// about half of a whole pass.
fn send_posted(qp: &Qp, g: &mut Inner, now: u64) -> Option<(Result<(), Fault>, bool)> {
    let Inner {
        state,
        attr,
        sq,
        rq,
        rc,
        ..
    } = g;
    let rc = rc.as_mut()?;
    let RcConn { link, tx, st, .. } = rc;
    let sock = link.as_mut()?;
    let plain = *state == QpState::Rts
        && !sock.output_on_tcp()
        && tx.is_empty()
        && st.resps.is_empty()
        && st.rnr_until.is_none()
        && !st.halted
        && !st.budget_cut
        && (sq.tx..sq.len()).all(|i| {
            let w = sq.get(i);
            // Binds and invalidations finish at post and complete in a whole pass.
            w.len <= tx::CHUNK as u64 && w.state == TxState::Pending
        });
    if !plain {
        return None;
    }
    // As the whole pass sets it for a link on rings.
    st.offer_place = qp.dev.direct;
    let mut cx = FrameContext {
        qp,
        state: *state,
        attr,
        sq,
        rq,
        st,
        tx,
        now,
        peer: None,
    };
    requester::pump(&mut cx);
    if cx.tx.flush(sock).is_err() {
        return Some((Err(Fault::Broken), false));
    }
    if cx.st.halted {
        // Sending failed a WQE locally (a bad lkey): it completes in order now.
        if let Err(f) = requester::complete(&mut cx) {
            return Some((Err(f), false));
        }
    }
    Some((Ok(()), cx.end_pass()))
}

fn drive(qp: &Qp, g: &mut Inner, now: u64, read: bool, budget: usize) -> (Result<(), Fault>, bool) {
    let Inner {
        state,
        attr,
        sq,
        rq,
        rc,
        ..
    } = g;
    let state = *state;
    let Some(rc) = rc.as_mut() else {
        return (Ok(()), false);
    };
    rc.st.budget_cut = false;
    if matches!(state, QpState::Reset | QpState::Init) {
        return (Ok(()), false);
    }
    if rc.link.is_none() {
        if state == QpState::Err {
            return (Ok(()), false);
        }
        if rc.st.connector && now >= rc.st.connect_at {
            try_connect(qp, rc, now);
        }
        if rc.link.is_none() {
            let connector = rc.st.connector;
            let cx = FrameContext {
                qp,
                state,
                attr,
                sq,
                rq,
                st: &mut rc.st,
                tx: &mut rc.tx,
                now,
                peer: None,
            };
            if requester::budget_spent(&cx) {
                return (Err(Fault::Send(WcStatus::RetryExcErr)), false);
            }
            return (Ok(()), connector || cx.sq.len() > 0);
        }
    }
    let RcConn {
        link, rx, tx, st, ..
    } = rc;
    let Some(sock) = link.as_mut() else {
        return (Ok(()), false);
    };
    sock.set_now(now);
    sock.poll_offer(qp);
    if tx.is_empty() {
        sock.output_idle();
    }
    if state == QpState::Err {
        return err_state(sock, rx, tx, st, read);
    }
    st.offer_place = qp.dev.direct && !sock.output_on_tcp();
    st.taken = 0;
    let direct = sock.take_direct();
    let mut cx = FrameContext {
        qp,
        state,
        attr,
        sq,
        rq,
        st,
        tx,
        now,
        peer: direct.as_ref().filter(|w| w.usable()),
    };
    let r = run(&mut cx, sock, rx, read, budget);
    let needs = cx.end_pass() || rx.holds_frames();
    sock.put_back_direct(direct);
    (r, needs)
}

/// An ERR QP executes nothing. It keeps its socket drained, finishes sending what
/// was already encoded (such as the NAK that moved it here), and answers requests with
/// one `NAK(QP error)` per pass, so the peer fails at once instead of after its retry
/// budget (the status is the one a silent QP would cause: RETRY_EXC_ERR).
fn err_state(
    sock: &mut Link,
    rx: &mut RxBuf,
    tx: &mut TxBuf,
    st: &mut RcProtocol,
    read: bool,
) -> (Result<(), Fault>, bool) {
    let mut drain = ErrDrain {
        nak: None,
        placing: &mut st.placing,
        lending: &mut st.lending,
    };
    let mut eof = false;
    if read {
        rx.discard_current();
        eof = !matches!(
            rx.receive(sock, MAX_READ_PER_PASS, &mut drain),
            Ok(Stop::Drained | Stop::Budget)
        );
    }
    if let Some(seq) = drain.nak.filter(|_| tx.has_room()) {
        wire::encode(
            &mut tx.buf,
            0,
            seq,
            st.expected,
            &Body::Nak(Nak::QpError),
            0,
        );
    }
    let _ = tx.flush(sock);
    if eof {
        return (Err(Fault::Broken), false);
    }
    (Ok(()), !tx.is_empty())
}

/// Reads an ERR QP's input, writing no payload anywhere, and notes the last request
/// (and which placed Reads and lent segments the peer is done with).
struct ErrDrain<'a> {
    nak: Option<u32>,
    placing: &'a mut placed::Placing,
    lending: &'a mut placed::Placing,
}

impl rx::Handler for ErrDrain<'_> {
    fn head(&mut self, h: &Head, _into: &mut Pieces) -> Result<(), Fault> {
        self.lending.release_acked(h.ack);
        match h.body {
            Body::Send { .. }
            | Body::Write { .. }
            | Body::SendLent { .. }
            | Body::WriteLent { .. }
            | Body::ReadReq { .. }
            | Body::AtomicReq { .. } => self.nak = Some(h.seq),
            Body::ReadResp | Body::ReadPlaced { .. } if h.flags & wire::LAST != 0 => {
                self.placing.release_through(h.seq)
            }
            Body::Nak(n) if n.ends_responder() => {
                self.placing.release_all();
                self.lending.release_all();
            }
            _ => {}
        }
        Ok(())
    }

    fn end(&mut self, _h: &Head) -> Result<(), Fault> {
        Ok(())
    }

    fn malformed(&mut self, _e: WireError) {}
}

fn run(
    cx: &mut FrameContext<'_>,
    sock: &mut Link,
    rx: &mut RxBuf,
    read: bool,
    budget: usize,
) -> Result<(), Fault> {
    // Bounded, so that one busy connection cannot hold a poll call for long; what is
    // left stays readable for the next pass.
    // A pass that would not read still does before it declares the peer silent: what
    // the peer sent (a progress ACK) may be waiting unread in the socket.
    let read = read || requester::budget_spent(cx);
    if read && rx.receive(sock, MAX_READ_PER_PASS, cx)? == Stop::Eof {
        return Err(Fault::Broken);
    }
    let bytes_read = if read { rx.last_read() } else { 0 };
    requester::complete(cx)?;
    requester::timers(cx)?;
    let mut written = 0;
    loop {
        // The halves take turns at encoding first: with the queue bounded to a chunk,
        // a Send waits behind at most one chunk of a Read response, and vice versa.
        let fatal = if cx.st.resp_first {
            let f = responder::pump(cx)?;
            if !f {
                requester::pump(cx);
            }
            f
        } else {
            requester::pump(cx);
            responder::pump(cx)?
        };
        cx.st.resp_first = !cx.st.resp_first;
        // A fresh clock after a long pass (bulk data), which must still ACK at its
        // end; a short one ends about when it started. Read only when a lone ACK is
        // in question (outgoing frames carry the ACK anyway).
        let long_pass = bytes_read + written >= LONG_PASS_BYTES;
        let owed_long = || {
            cx.st.owed_since.is_some_and(|t| {
                let now = if long_pass {
                    cx.qp.dev.now_ns()
                } else {
                    cx.now
                };
                now.saturating_sub(t) >= ACK_DELAY_NS
            })
        };
        let unacked = unacked(cx.st);
        let before_sleep = || unacked >= ACKS_BEFORE_SLEEP && cx.qp.cqs_asleep();
        if unacked != 0
            && cx.tx.is_empty()
            && (unacked >= ACK_EVERY || owed_long() || before_sleep())
        {
            cx.frame(0, 0, &Body::Ack, 0);
        }
        if cx.tx.is_empty() && receiving_long(cx.st, cx.now) {
            cx.frame(0, 0, &Body::Ack, 0);
        }
        written += cx.tx.flush(sock).map_err(|_| Fault::Broken)?;
        if fatal {
            return Err(Fault::Err);
        }
        let more = !cx.st.resps.is_empty()
            || (cx.sq.tx < cx.sq.len() && !cx.st.halted && cx.st.rnr_until.is_none());
        if !cx.tx.is_empty() || !more || written >= budget {
            cx.st.budget_cut = cx.tx.is_empty() && more;
            break;
        }
    }
    // Sending may have failed a WQE locally (a bad lkey): complete it in order.
    // Only a failure halts the queue; otherwise the pass's first `complete` already
    // took what could complete (half of this function's calls, on every pass).
    if cx.st.halted {
        requester::complete(cx)?;
    }
    Ok(())
}

/// Whether a message is arriving, with frames of it heard since this side last sent
/// anything, and that was [`PROGRESS_ACK_NS`] ago: time for an ACK that says so.
fn receiving_long(st: &RcProtocol, now: u64) -> bool {
    (st.in_msg.is_some() || st.write_open)
        && st.heard_at > st.sent_at
        && now.saturating_sub(st.sent_at) >= PROGRESS_ACK_NS
}

impl rx::Handler for FrameContext<'_> {
    fn head(&mut self, h: &Head, into: &mut Pieces) -> Result<(), Fault> {
        self.st.progress_at = self.now;
        self.st.heard_at = self.now;
        requester::on_ack(self, h.ack);
        match h.body {
            Body::Hello { .. } | Body::ShmSwitch => {
                bump(&self.qp.dev.stats.rc_frames_malformed);
                Err(Fault::Broken)
            }
            Body::Send { .. } => responder::send_head(self, h, into),
            Body::Write { va, rkey, .. } => responder::write_head(self, h, va, rkey, into),
            Body::SendLent { lent, .. } | Body::WriteLent { lent, .. } => {
                responder::take_lent(self, h, lent, into)
            }
            Body::ReadReq {
                va,
                rkey,
                len,
                place,
            } => responder::on_read_req(self, h.seq, va, rkey, len, place),
            Body::AtomicReq { va, rkey, op } => responder::on_atomic(self, h.seq, va, rkey, op),
            Body::ReadResp => requester::read_resp_head(self, h, into),
            Body::ReadPlaced { len } => requester::read_placed(self, h, len),
            Body::AtomicResp { orig } => requester::on_atomic_resp(self, h.seq, orig),
            Body::Ack => Ok(()),
            Body::Nak(n) => {
                requester::on_nak(self, h.seq, n);
                Ok(())
            }
        }
    }

    fn end(&mut self, h: &Head) -> Result<(), Fault> {
        match h.body {
            Body::Send { imm } => responder::send_end(self, h, imm),
            Body::Write { imm, .. } => responder::write_end(self, h, imm),
            Body::ReadResp => requester::read_resp_end(self, h),
            _ => Ok(()),
        }
    }

    fn malformed(&mut self, _e: WireError) {
        bump(&self.qp.dev.stats.rc_frames_malformed);
    }

    fn sated(&self) -> bool {
        self.st.taken >= MAX_READ_PER_PASS
    }
}
