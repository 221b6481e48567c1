//! The byte transport under one RC connection: the TCP stream, or shared-memory rings
//! once both sides agreed (see [`crate::soft::shm`]).
//!
//! Each direction switches on its own. The writer, holding the peer's ring and with
//! nothing left half-written on TCP (its output queue empty), sends one `SHM_SWITCH`
//! frame on TCP and writes every later byte into the ring. The reader decodes frames
//! from TCP until it meets `SHM_SWITCH` and from its inbox after it. Nothing is ever
//! reordered: TCP carries a prefix of the stream, the ring the rest.
//!
//! The TCP socket stays open as the liveness signal: after the switch it only ever
//! becomes readable at its end, which reads as the stream's end (the QP goes to ERR
//! as on TCP).
//!
//! A ring's doorbell is a one-shot request, and whoever reads the ring drains it: a
//! poller that read the bytes whose ring the helper had asked for spends the
//! helper's request, and if it then goes away without arming its CQ, nothing wakes
//! the helper for the next bytes (a socket would have become readable again). So a
//! writer whose bytes sit unread for [`STUCK_NS`] rings the peer's bell regardless
//! of `waiting`, once per such stop; the reader's helper, still watching the bell,
//! takes over. (A pass that does not read, such as the helper's timer pass of a QP
//! waiting for a Read response, looks at the ring anyway: see `rc::progress`.)

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use crate::soft::device::{bump, Device};
use crate::soft::qp::Qp;
use crate::soft::shm::handshake::Probe;
use crate::soft::shm::{direct, Answer, Inbox, Offer, PeerWriter, Producer};
use crate::soft::wire::{self, Body, HDR_LEN};

use super::Fault;

/// How often a reader with an empty ring asks the TCP socket whether the peer is gone
/// (one `recv` with `MSG_PEEK`); the socket's readiness also wakes pollers at once.
const PROBE_EVERY_NS: u64 = 1_000_000;
/// How long the peer may leave this side's bytes unread before its bell is rung
/// regardless of `waiting` (see the module docs). Looked at once per this period.
const STUCK_NS: u64 = 1_000_000;
/// How long this side's output ring must stay empty, with nothing written, before
/// the pages bulk data touched are given back (`ring::Producer::release_idle`): long
/// enough that a transfer pausing between messages does not fault them in again.
const RELEASE_IDLE_NS: u64 = 100_000_000;

/// Where this side's output goes.
enum Out {
    Tcp,
    /// The peer's ring is ours, waiting for the output queue to empty.
    Ready(Producer),
    /// `SHM_SWITCH` is being written on TCP (`sent` bytes of it so far).
    Switching(Producer, usize),
    Ring(Producer),
}

/// The byte transport of one RC connection.
pub(crate) struct Link {
    sock: TcpStream,
    out: Out,
    /// The ring the peer writes into, once created (read after `SHM_SWITCH`).
    inbox: Option<Arc<Inbox>>,
    reading_ring: bool,
    /// The accepting side's handshake under way.
    offer: Option<Offer>,
    /// The device clock of the current progress pass ([`Link::set_now`]), and when the
    /// socket is next looked at.
    now: u64,
    next_probe: u64,
    /// When the peer's reading of the ring is next looked at, and its `head` then if
    /// bytes were waiting (and whether its bell was rung for that stop).
    next_watch: u64,
    seen_head: Option<u64>,
    nudged: bool,
    /// Bytes published at the last look, and since when the ring is idle (empty, nothing
    /// written; `None`: not idle, or its pages were already released).
    seen_tail: u64,
    idle_since: Option<u64>,
    /// The device, once rings are in use: its doorbell count.
    dev: Option<Arc<Device>>,
    /// This side's right to place Read responses into the peer (`shm::direct`).
    direct: Option<PeerWriter>,
}

/// The bytes of an `SHM_SWITCH` frame.
fn switch_frame() -> [u8; HDR_LEN] {
    let mut v = Vec::with_capacity(HDR_LEN);
    wire::encode(&mut v, 0, 0, 0, &Body::ShmSwitch, 0);
    let mut b = [0u8; HDR_LEN];
    b.copy_from_slice(&v);
    b
}

impl Link {
    pub(crate) fn tcp(sock: TcpStream) -> Link {
        Link {
            sock,
            out: Out::Tcp,
            inbox: None,
            reading_ring: false,
            offer: None,
            now: 0,
            next_probe: 0,
            next_watch: 0,
            seen_head: None,
            nudged: false,
            seen_tail: 0,
            idle_since: None,
            dev: None,
            direct: None,
        }
    }

    /// The device clock of this progress pass (reading the clock per empty poll would
    /// cost more than the poll). Also looks, once per [`STUCK_NS`], whether the peer
    /// stopped reading this side's bytes.
    pub(crate) fn set_now(&mut self, now: u64) {
        self.now = now;
        if now >= self.next_watch {
            self.next_watch = now + STUCK_NS;
            self.watch_peer();
        }
    }

    /// Rings the peer's bell if bytes have waited unread in its ring since the last
    /// look (once per stop: see the module docs); gives back the ring's bulk pages
    /// once it has been idle for [`RELEASE_IDLE_NS`].
    fn watch_peer(&mut self) {
        let Out::Ring(p) = &mut self.out else { return };
        let head = p.unread();
        if head.is_some() && head == self.seen_head {
            if !self.nudged {
                self.nudged = true;
                p.nudge();
                count_doorbell(&self.dev);
            }
        } else {
            self.seen_head = head;
            self.nudged = false;
        }
        let tail = p.published();
        if head.is_some() || tail != self.seen_tail {
            self.seen_tail = tail;
            self.idle_since = Some(self.now);
        } else if self
            .idle_since
            .is_some_and(|t| self.now.saturating_sub(t) >= RELEASE_IDLE_NS)
        {
            self.idle_since = None;
            p.release_idle();
        }
    }

    /// Whether the ring this side reads holds bytes (one atomic load).
    pub(crate) fn ring_has_input(&self) -> bool {
        self.reading_ring && self.inbox.as_ref().is_some_and(|i| i.has_data())
    }

    /// This side's right to copy into and out of the peer directly (a probe passed),
    /// taken by a pass that reads this link's frames; [`Link::put_back_direct`] returns
    /// it.
    pub(crate) fn take_direct(&mut self) -> Option<PeerWriter> {
        self.direct.take()
    }

    /// Returns what [`Link::take_direct`] took.
    pub(crate) fn put_back_direct(&mut self, w: Option<PeerWriter>) {
        if self.direct.is_none() {
            self.direct = w;
        }
    }

    pub(crate) fn tcp_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Every descriptor whose readiness means "progress this QP": the TCP socket, the
    /// inbox's doorbell, a handshake's socket.
    pub(crate) fn wake_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        std::iter::once(self.sock.as_raw_fd())
            .chain(self.inbox.as_ref().map(|i| i.bell().raw()))
            .chain(self.offer.as_ref().map(Offer::raw))
    }

    /// The TCP socket, the rest let go (rings, handshake): for a destroyed QP whose
    /// peer may still access its memory (`held_for_peer`).
    pub(crate) fn into_socket(self) -> TcpStream {
        self.sock
    }

    /// Tests only: both directions run on rings.
    #[cfg(test)]
    pub(crate) fn on_rings(&self) -> bool {
        matches!(self.out, Out::Ring(_)) && self.reading_ring
    }

    /// Tests only: the ring this side reads.
    #[cfg(test)]
    pub(crate) fn inbox(&self) -> Option<&Inbox> {
        self.inbox.as_deref()
    }

    /// Whether this side's output still goes into the TCP socket (not yet a ring), so
    /// that stalled output waits for the socket's room.
    pub(crate) fn output_on_tcp(&self) -> bool {
        !matches!(self.out, Out::Ring(_))
    }

    /// A poller or the helper may sleep on this QP: the peer's next publish must ring.
    pub(crate) fn announce_sleep(&self) {
        if self.inbox.as_ref().is_some_and(|i| i.announce_sleep()) {
            count_doorbell(&self.dev);
        }
    }

    /// Writes what the transport takes now from `iov` (in order); `Ok(0)` when it
    /// takes nothing (a full ring, the switch frame still going out). `ring`: a
    /// sleeping ring reader is woken (TCP has no such choice: its reader's poll sees
    /// the bytes).
    ///
    /// # Safety
    /// Every iovec must name readable memory, live for the call.
    pub(crate) unsafe fn write(&mut self, iov: &[libc::iovec], ring: bool) -> io::Result<usize> {
        if let Out::Switching(_, sent) = &mut self.out {
            let f = switch_frame();
            while *sent < f.len() {
                match send(&self.sock, &f[*sent..]) {
                    Ok(n) => *sent += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                    Err(e) => return Err(e),
                }
            }
            let Out::Switching(p, _) = std::mem::replace(&mut self.out, Out::Tcp) else {
                unreachable!("matched above")
            };
            self.out = Out::Ring(p);
        }
        match &mut self.out {
            Out::Ring(p) => {
                // SAFETY: the caller guarantees each iovec names live, readable memory.
                let slice = |v: &libc::iovec| unsafe {
                    std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len)
                };
                // One iovec (every small frame) builds one slice, not an array of
                // `MAX_IOV` (a kilobyte of stores per write).
                let one: [&[u8]; 1];
                let mut many: [&[u8]; MAX_IOV];
                let slices: &[&[u8]] = if let [v] = iov {
                    one = [slice(v)];
                    &one
                } else {
                    many = [&[]; MAX_IOV];
                    let k = iov.len().min(MAX_IOV);
                    for (s, v) in many.iter_mut().zip(&iov[..k]) {
                        *s = slice(v);
                    }
                    &many[..k]
                };
                let n = if ring {
                    p.write(slices)
                } else {
                    p.write_quiet(slices)
                };
                let n = n.map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, "peer broke the ring")
                })?;
                if p.take_rang() {
                    count_doorbell(&self.dev);
                }
                Ok(n)
            }
            _ if iov.len() == 1 => {
                // SAFETY: as above.
                let b = unsafe {
                    std::slice::from_raw_parts(iov[0].iov_base.cast::<u8>(), iov[0].iov_len)
                };
                send(&self.sock, b)
            }
            // SAFETY: as above.
            _ => unsafe { sendmsg(&self.sock, iov) },
        }
    }

    /// Reads from the TCP socket into `iov` (in order). `Ok(None)`: nothing now;
    /// `Ok(Some(0))`: the peer is gone (end of stream). Input on the ring is read in
    /// place instead ([`Link::ring_input`]).
    ///
    /// # Safety
    /// Every iovec must name writable memory, live for the call.
    pub(crate) unsafe fn read(&mut self, iov: &mut [libc::iovec]) -> Result<Option<usize>, Fault> {
        debug_assert!(!self.reading_ring, "ring input is read in place");
        // SAFETY: the caller's guarantee.
        unsafe { readv(&self.sock, iov) }
    }

    /// The ring this side reads, once its input moved there (`SHM_SWITCH`): read in
    /// place ([`super::rx::RxBuf`]), then [`Link::after_ring_pass`].
    pub(crate) fn ring_input(&self) -> Option<&Inbox> {
        self.inbox.as_deref().filter(|_| self.reading_ring)
    }

    /// After a pass over the ring: rings the peer's bell if its writer waits for the
    /// space the pass freed; after a pass that found nothing, looks (at most once per
    /// [`PROBE_EVERY_NS`]) whether the peer is gone. `Ok(true)`: it is (what it
    /// published before, if anything, is still to be read).
    pub(crate) fn after_ring_pass(&mut self, wanted: bool, found: bool) -> Result<bool, Fault> {
        if wanted {
            // The peer's writer waits for this space: its inbox bell wakes it.
            if let Out::Ready(p) | Out::Switching(p, _) | Out::Ring(p) = &self.out {
                p.nudge();
                count_doorbell(&self.dev);
            }
        }
        if found || self.now < self.next_probe {
            return Ok(false);
        }
        self.next_probe = self.now + PROBE_EVERY_NS;
        match peek(&self.sock) {
            PeekResult::Eof => Ok(true),
            PeekResult::Alive => Ok(false),
            // Bytes on TCP after SHM_SWITCH (or a socket error): not a valid peer.
            PeekResult::Broken => Err(Fault::Broken),
        }
    }

    /// `SHM_SWITCH` arrived: the rest of the stream is in the inbox.
    pub(crate) fn switch_input(&mut self) -> Result<(), Fault> {
        if self.inbox.is_none() || self.reading_ring {
            return Err(Fault::Broken);
        }
        self.reading_ring = true;
        Ok(())
    }

    /// Called with the output queue empty: a ring that became ours starts its switch.
    pub(crate) fn output_idle(&mut self) {
        if matches!(self.out, Out::Ready(_)) {
            let Out::Ready(p) = std::mem::replace(&mut self.out, Out::Tcp) else {
                unreachable!("matched above")
            };
            self.out = Out::Switching(p, 0);
        }
    }

    /// The accepting side: starts the handshake if the `HELLO` said the peer is on
    /// this host, as this user, with shared memory on (`listener` non-zero) and this
    /// device has it on too. Failure only means TCP.
    pub(crate) fn offer(
        &mut self,
        qp: &Qp,
        peer_host: u64,
        listener: u64,
        peer_qpn: u32,
        gid: [u8; 16],
    ) {
        if listener == 0
            || peer_host == 0
            || peer_host != crate::soft::shm::ident::host_identity()
            || qp.dev.shm.is_none()
        {
            return;
        }
        match Offer::send(listener, qp.qpn, peer_qpn, gid, qp.dev.direct) {
            Ok(mut o) => {
                let inbox = Arc::new(o.inbox.take().expect("a new offer has its inbox"));
                watch(qp, o.raw());
                self.install_inbox(qp, inbox);
                self.offer = Some(o);
            }
            Err(e) => {
                tracing::debug!(qpn = qp.qpn, error = %e, "soft RC QP stays on TCP: no shared-memory handshake")
            }
        }
    }

    /// The accepting side: looks for the handshake's answer.
    pub(crate) fn poll_offer(&mut self, qp: &Qp) {
        let Some(o) = &self.offer else { return };
        match o.poll() {
            Answer::Pending => {}
            Answer::Accepted(p, probe) => {
                self.offer = None;
                self.direct = direct::settle(&qp.dev, qp.qpn, probe);
                self.use_ring(qp, p, None);
            }
            Answer::Refused(e) => {
                self.offer = None;
                tracing::debug!(qpn = qp.qpn, error = %e, "soft RC QP stays on TCP: shared memory refused");
            }
        }
    }

    /// The connecting side: the peer's handshake was accepted.
    pub(crate) fn accept_rings(
        &mut self,
        qp: &Qp,
        out: Producer,
        inbox: Inbox,
        peer_pid: i32,
        probe: Probe,
    ) {
        self.direct = direct::settle(&qp.dev, qp.qpn, probe);
        self.install_inbox(qp, Arc::new(inbox));
        self.use_ring(qp, out, Some(peer_pid));
    }

    /// Whether a handshake may still start (nothing of it has happened yet).
    pub(crate) fn is_plain_tcp(&self) -> bool {
        matches!(self.out, Out::Tcp) && self.inbox.is_none() && self.offer.is_none()
    }

    fn install_inbox(&mut self, qp: &Qp, inbox: Arc<Inbox>) {
        self.dev = Some(qp.dev.clone());
        watch(qp, inbox.bell().raw());
        // With two CQs, one may sleep while the other polls: neither withdraws the
        // other's request to ring (see `Cq::poll`).
        let shared = !Arc::ptr_eq(&qp.send_cq, &qp.recv_cq);
        qp.send_cq.watch_inbox(qp.qpn, &inbox, shared);
        if shared {
            qp.recv_cq.watch_inbox(qp.qpn, &inbox, shared);
        }
        self.inbox = Some(inbox);
        // The helper's watch is armed: it must hear of bytes while nobody polls.
        self.announce_sleep();
    }

    fn use_ring(&mut self, qp: &Qp, p: Producer, peer_pid: Option<i32>) {
        self.dev = Some(qp.dev.clone());
        self.out = Out::Ready(p);
        bump(&qp.dev.stats.rc_shm_links);
        tracing::debug!(qpn = qp.qpn, peer_pid = ?peer_pid, "soft RC QP sends over shared memory");
        qp.defer();
    }
}

/// Watches `fd` for this QP as its socket is watched: the helper and both CQs.
fn watch(qp: &Qp, fd: RawFd) {
    qp.dev.helper.watch_qp(fd, qp.qpn);
    qp.send_cq.watch(fd, qp.qpn);
    if !Arc::ptr_eq(&qp.send_cq, &qp.recv_cq) {
        qp.recv_cq.watch(fd, qp.qpn);
    }
}

/// The connecting device's side of handshakes: answers every request waiting at its
/// listener (run by the helper when the listener is readable). `false`: accepting
/// failed (out of descriptors): the caller stops watching the listener, whose later
/// handshakes then go unanswered and their QPs stay on TCP, rather than spin on it.
pub(crate) fn serve_handshakes(dev: &Device) -> bool {
    let Some(l) = dev.shm.as_ref() else {
        return true;
    };
    loop {
        let req = match l.accept() {
            Ok(None) => return true,
            Ok(Some(Ok(r))) => r,
            Ok(Some(Err(e))) => {
                bump(&dev.stats.rc_frames_malformed);
                tracing::debug!(error = %e, "shared-memory handshake refused");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "shared-memory listener: accept failed; new QPs keep to TCP");
                return false;
            }
        };
        let Some(qp) = dev.lookup_qp(req.dst_qpn) else {
            continue;
        };
        let mut g = qp.lock();
        let state = g.state;
        let Some(rc) = g.rc.as_mut() else {
            continue;
        };
        let fits = rc.st.connector
            && rc.st.peer_qpn == req.src_qpn
            && rc.st.peer_gid.0 == req.gid
            && !matches!(
                state,
                crate::qp_state::QpState::Err | crate::qp_state::QpState::Reset
            )
            && rc.link.as_ref().is_some_and(Link::is_plain_tcp);
        if !fits {
            continue; // dropping the request refuses it
        }
        let pid = req.pid;
        match req.answer(dev.direct) {
            Ok((out, inbox, probe)) => {
                let link = rc.link.as_mut().expect("checked above");
                link.accept_rings(&qp, out, inbox, pid, probe);
            }
            Err(e) => tracing::debug!(error = %e, "shared-memory handshake: answer failed"),
        }
    }
}

/// Counts a doorbell rung by a link in its device's statistics.
fn count_doorbell(dev: &Option<Arc<Device>>) {
    if let Some(d) = dev {
        bump(&d.stats.rc_shm_doorbells);
    }
}

/// Iovecs per ring write (as per `sendmsg` in `tx`).
const MAX_IOV: usize = 64;

enum PeekResult {
    Alive,
    Eof,
    Broken,
}

/// Whether the TCP socket ended, without consuming anything.
fn peek(sock: &TcpStream) -> PeekResult {
    let mut b = [0u8; 1];
    // SAFETY: one writable byte, live for the call.
    let n = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => PeekResult::Eof,
        n if n > 0 => PeekResult::Broken,
        _ => match io::Error::last_os_error().kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => PeekResult::Alive,
            _ => PeekResult::Eof,
        },
    }
}

/// One `send` of contiguous bytes.
fn send(sock: &TcpStream, b: &[u8]) -> io::Result<usize> {
    // SAFETY: `b` is a live slice; MSG_NOSIGNAL turns a closed peer into EPIPE.
    let n = unsafe {
        libc::send(
            sock.as_raw_fd(),
            b.as_ptr().cast(),
            b.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One `sendmsg` of `iov`.
///
/// # Safety
/// As [`Link::write`].
unsafe fn sendmsg(sock: &TcpStream, iov: &[libc::iovec]) -> io::Result<usize> {
    // SAFETY: a zeroed msghdr is valid; it names the caller's iovecs, live for the
    // call. MSG_NOSIGNAL turns a closed peer into EPIPE instead of SIGPIPE.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len() as _;
        libc::sendmsg(
            sock.as_raw_fd(),
            &msg,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One `readv` (a plain `read` for one buffer). `None`: would block.
///
/// # Safety
/// As [`Link::read`].
unsafe fn readv(sock: &TcpStream, iov: &mut [libc::iovec]) -> Result<Option<usize>, Fault> {
    loop {
        // SAFETY: the caller guarantees every iovec names writable, live memory.
        let n = unsafe {
            if iov.len() == 1 {
                libc::read(sock.as_raw_fd(), iov[0].iov_base, iov[0].iov_len)
            } else {
                libc::readv(sock.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int)
            }
        };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(Fault::Broken),
        }
    }
}
