//! The device's one helper thread: what must happen while nobody polls.
//!
//! * Accepting RC connections and routing each, by its `HELLO`, to the QP that
//!   expects that peer (or parking it until that QP reaches RTR).
//! * Progress for QPs none of whose CQs was polled for [`IDLE_NS`]: the target of an
//!   RDMA Write, Read or atomic whose application sleeps, RNR retries, owed ACKs,
//!   the retry budget, connection retries.
//! * Output left behind by a poller that went to sleep: a QP whose socket was full
//!   (a 4 MiB Read response, say) when its CQ was armed is written at once, and then
//!   whenever its socket has room again (`EPOLLOUT`), until it is done or a poller is
//!   back. Ticks alone left such a transfer idle for up to a tick per socket-full.
//!
//! How it stays out of the way: QP sockets and the UDP socket are in its epoll set
//! one-shot. When one fires while the application polls that QP's CQ, the helper
//! leaves it disarmed and only re-checks "last polled" stamps at a 1 ms tick; it
//! re-arms the socket once the application has gone idle. So it wakes at most once per
//! burst of activity, never per message. The tick runs only while some QP is busy
//! (outstanding sends, an owed ACK, an RNR wait, pending output) or a socket is
//! disarmed; an idle device makes no wake-ups at all. A QP that becomes busy while the
//! helper sleeps without a timeout pokes it once. Writability is watched only for a
//! QP whose output waits while its pollers sleep, which small messages never cause.
//!
//! It holds the device by `Weak` and exits when the device is dropped.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::addr::Gid;
use crate::mr_buffer::MrBuffer;
use crate::qp_state::QpState;

use super::device::{bump, Device};
use super::held_for_peer::HeldForPeer;
use super::qp::Qp;
use super::rc;
use super::sys::{self, Epoll, EventFd};
use super::wire::{self, Body, HELLO_LEN};

/// A QP whose CQs were not polled for this long gets progress from the helper.
pub(crate) const IDLE_NS: u64 = 1_000_000;
const TICK_MS: i32 = 1;
const SLOW_TICK_MS: i32 = 100;
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
const PARK_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_PENDING: usize = 4096;
/// How long the listener is left alone after an accept failed for lack of resources.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

// Event tokens: the kind in the top byte, a QPN or an fd below.
const T_WAKE: u64 = 1 << 56;
const T_LISTEN: u64 = 2 << 56;
const T_UD: u64 = 3 << 56;
const T_QP: u64 = 4 << 56;
const T_PENDING: u64 = 5 << 56;
const T_SHM: u64 = 6 << 56;
const T_HELD: u64 = 7 << 56;
const KIND: u64 = 0xff << 56;

/// What the device and its helper share; outlives both, so the helper never waits on
/// a descriptor the device has closed.
pub(crate) struct Shared {
    epoll: Epoll,
    wake: EventFd,
    stop: AtomicBool,
    /// The helper waits without a timeout.
    sleeping: AtomicBool,
    /// QPs with something a timer must look after.
    busy: AtomicUsize,
    /// Buffers of destroyed QPs whose peers may still access them.
    pub(crate) held: HeldForPeer,
}

impl Shared {
    pub(crate) fn new() -> io::Result<Shared> {
        let s = Shared {
            epoll: Epoll::new()?,
            wake: EventFd::new()?,
            stop: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            busy: AtomicUsize::new(0),
            held: HeldForPeer::default(),
        };
        s.epoll.add(s.wake.raw(), T_WAKE)?;
        Ok(s)
    }

    /// Makes the helper look at every QP now (output was left to it).
    pub(crate) fn poke(&self) {
        self.wake.signal();
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake.signal();
    }

    /// Keeps a destroyed RC QP's `bufs` until the peer at the other end of `sock`
    /// closes it (`held_for_peer`), watching the socket in place of the QP.
    pub(crate) fn hold_for_peer(&self, sock: TcpStream, bufs: Vec<Arc<MrBuffer>>) {
        let fd = self.held.hold(sock, bufs);
        let token = T_HELD | fd as u64;
        // Watched as its QP's socket until now (armed or not); else added.
        if self.epoll.modify(fd, token).is_err() {
            let _ = self.epoll.add_oneshot(fd, token);
        }
    }

    /// Watches an RC socket (armed).
    pub(crate) fn watch_qp(&self, fd: RawFd, qpn: u32) {
        let _ = self.epoll.add_oneshot(fd, T_QP | u64::from(qpn));
    }

    pub(crate) fn watch_ud(&self, fd: RawFd) -> io::Result<()> {
        self.epoll.add_oneshot(fd, T_UD)
    }

    /// A QP became busy (`true`) or idle. Ordering: the QP publishes `busy` before
    /// reading `sleeping`, the helper publishes `sleeping` before reading `busy`
    /// (both SeqCst), so one of them sees the other and the helper is not left asleep.
    pub(crate) fn set_busy(&self, busy: bool) {
        if busy {
            self.busy.fetch_add(1, Ordering::SeqCst);
            if self.sleeping.load(Ordering::SeqCst) {
                self.wake.signal();
            }
        } else {
            self.busy.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// An accepted connection whose QP is not ready for it yet.
pub(crate) struct Parked {
    hint: rc::ShmHint,
    gid: Gid,
    src_qpn: u32,
    dst_qpn: u32,
    sock: TcpStream,
    since: Instant,
}

/// An accepted connection whose `HELLO` has not fully arrived.
struct Pending {
    sock: TcpStream,
    buf: [u8; HELLO_LEN],
    got: usize,
    since: Instant,
}

pub(crate) fn spawn(dev: &Arc<Device>, sh: Arc<Shared>) -> io::Result<()> {
    sh.epoll.add(dev.listener_fd(), T_LISTEN)?;
    sh.watch_ud(dev.udp_fd())?;
    if let Some(l) = dev.shm.as_ref() {
        sh.epoll.add(l.raw(), T_SHM)?;
    }
    let weak = Arc::downgrade(dev);
    std::thread::Builder::new()
        .name("soft-rdma-helper".into())
        .spawn(move || run(weak, sh))?;
    Ok(())
}

/// Hashes a QPN with one multiplication. The set of disarmed QPs is looked up for
/// every QP on every wake-up, and SipHash (the default, which resists inputs chosen
/// to collide) cost more than the rest of such a look; QPNs are this device's own
/// numbers, not a peer's.
#[derive(Default)]
struct QpnHasher(u64);

impl Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u32(u32::from(*b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        // Fibonacci hashing: the high bits, which the table's control bytes use,
        // depend on every bit of the QPN.
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// State the helper keeps between wake-ups.
#[derive(Default)]
struct Local {
    pending: Vec<Pending>,
    /// QPs whose socket fired while their application was polling.
    disarmed: HashSet<u32, BuildHasherDefault<QpnHasher>>,
    ud_disarmed: bool,
    /// When the listener, taken out of the watch set after a failed accept (out of
    /// descriptors or buffers), is watched again.
    listen_paused: Option<Instant>,
    /// Scratch list of live QPs, emptied before every wait.
    qps: Vec<Arc<Qp>>,
}

// Out of line, so that profiles name the helper thread's work (inlined into the
// thread's entry, callgrind counted it under `std`'s thread start).
#[inline(never)]
fn run(weak: Weak<Device>, sh: Arc<Shared>) {
    let mut evs = sys::events::<64>();
    let mut l = Local::default();
    let mut tick = false;
    loop {
        let slow = !l.pending.is_empty()
            || l.listen_paused.is_some()
            || weak.upgrade().is_some_and(|d| {
                !d.parked
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_empty()
            });
        let mut timeout = if tick {
            TICK_MS
        } else if slow {
            SLOW_TICK_MS
        } else {
            -1
        };
        if timeout < 0 {
            sh.sleeping.store(true, Ordering::SeqCst);
            if sh.busy.load(Ordering::SeqCst) > 0 {
                timeout = TICK_MS;
            }
        }
        let n = sh.epoll.wait(&mut evs, timeout).len();
        sh.sleeping.store(false, Ordering::SeqCst);
        let dev = weak.upgrade();
        let Some(dev) = dev.filter(|_| !sh.stop.load(Ordering::Acquire)) else {
            // Connections still saying hello close now, out of the watch set.
            drop(l);
            return release_held(&sh, &evs[..n]);
        };
        let mut hellos = false;
        for ev in &evs[..n] {
            let t = ev.u64;
            match t & KIND {
                T_WAKE => sh.wake.drain(),
                T_LISTEN | T_PENDING => hellos = true,
                T_UD => l.ud_disarmed = true,
                // Out of descriptors: stop watching rather than spin on it.
                T_SHM if !rc::link::serve_handshakes(&dev) => {
                    if let Some(l) = dev.shm.as_ref() {
                        sh.epoll.remove(l.raw());
                    }
                }
                T_SHM => {}
                T_QP => {
                    l.disarmed.insert((t & 0x00ff_ffff) as u32);
                }
                T_HELD => {
                    let fd = (t & !KIND) as RawFd;
                    if sh.held.readable(fd) {
                        sh.epoll.rearm(fd, t);
                    }
                }
                _ => {}
            }
        }
        if l.listen_paused.is_some_and(|t| Instant::now() >= t) {
            l.listen_paused = None;
            hellos |= sh.epoll.add(dev.listener_fd(), T_LISTEN).is_ok();
        }
        if hellos {
            if l.listen_paused.is_none() && !accept_all(&dev, &sh, &mut l.pending) {
                // The listener stays readable while accept fails: watched, it would
                // wake this thread at once, again and again. Look again later.
                sh.epoll.remove(dev.listener_fd());
                l.listen_paused = Some(Instant::now() + ACCEPT_PAUSE);
            }
            read_hellos(&dev, &sh, &mut l.pending);
        }
        l.pending.retain(|p| {
            let keep = p.since.elapsed() < HELLO_TIMEOUT;
            if !keep {
                sh.epoll.remove(p.sock.as_raw_fd());
            }
            keep
        });
        dev.parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| p.since.elapsed() < PARK_TIMEOUT);
        service(&dev, &sh, &mut l);
        tick = sh.busy.load(Ordering::SeqCst) > 0
            || !l.disarmed.is_empty()
            || l.ud_disarmed
            || dev.ud_held();
    }
}

/// The device is gone: waits for the peers of the destroyed QPs whose buffers are
/// still held to close their ends, lets each QP's buffers go as its peer does, and
/// returns once none is held (at once if none is). Freed only by the peer's close,
/// as while the device lived, not kept mapped for the life of the process. `first`:
/// the events of the wait that found the device gone, handled first (a one-shot
/// watch they report is off until handled).
fn release_held(sh: &Shared, first: &[libc::epoll_event]) {
    let on_held = |evs: &[libc::epoll_event]| {
        for ev in evs {
            let t = ev.u64;
            match t & KIND {
                T_HELD => {
                    let fd = (t & !KIND) as RawFd;
                    if sh.held.readable(fd) {
                        sh.epoll.rearm(fd, t);
                    }
                }
                // The device's last signals; its other descriptors are closed.
                T_WAKE => sh.wake.drain(),
                _ => {}
            }
        }
    };
    on_held(first);
    let mut evs = sys::events::<16>();
    while sh.held.buffers() > 0 {
        let n = sh.epoll.wait(&mut evs, -1).len();
        on_held(&evs[..n]);
    }
}

/// Progress for QPs (and the UDP socket) whose applications are not polling.
fn service(dev: &Device, sh: &Shared, l: &mut Local) {
    let now = dev.now_ns();
    l.qps.clear();
    l.qps.extend(
        dev.qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(Weak::upgrade),
    );
    let mut seen = 0;
    for qp in &l.qps {
        let fired = l.disarmed.contains(&qp.qpn);
        seen += usize::from(fired);
        let idle = !qp.attended(now, IDLE_NS);
        // Output waiting for the socket while the pollers sleep: go on now, not at a
        // tick (a tick-driven 4 MiB Read response halved rpc-bench's 4 MiB figure).
        let orphaned = qp.is_stalled() && qp.neglected(now);
        if !(orphaned || (idle && (fired || qp.is_busy()))) {
            continue;
        }
        // Read only if the socket said so; otherwise just timers and output.
        qp.progress(now, fired, rc::WRITE_PER_HELPER_PASS);
        // Still waiting: come back the moment the socket has room.
        let out = qp.is_stalled() && qp.neglected(now);
        if fired || out {
            l.disarmed.remove(&qp.qpn);
            let token = T_QP | u64::from(qp.qpn);
            qp.rc_rearm(out, |fd, writable| {
                if writable {
                    sh.epoll.rearm_writable(fd, token);
                } else {
                    sh.epoll.rearm(fd, token);
                }
            });
        }
    }
    if seen < l.disarmed.len() {
        // Some fired QPs have gone away.
        l.disarmed.retain(|q| dev.lookup_qp(*q).is_some());
    }
    // Dropping the scratch references here, not while waiting, lets QPs die promptly.
    // Room for the QPs of this pass, not of the busiest one (after a burst of
    // clients, 8 KB this long-lived thread would keep for nothing).
    super::compact::shrink_vec(&mut l.qps);
    l.qps.clear();
    if l.ud_disarmed && !dev.ud_attended(now, IDLE_NS) {
        dev.ud_drain();
        l.ud_disarmed = false;
        sh.epoll.rearm(dev.udp_fd(), T_UD);
    }
    dev.ud_release_held(now);
}

/// Accepts what is waiting; false if accept failed for another reason than that
/// nothing waits (EMFILE, ENFILE, ENOBUFS: the connection stays queued).
fn accept_all(dev: &Device, sh: &Shared, pending: &mut Vec<Pending>) -> bool {
    loop {
        let sock = match dev.listener.accept() {
            Ok((sock, _)) => sock,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        };
        if pending.len() >= MAX_PENDING || sock.set_nonblocking(true).is_err() {
            continue;
        }
        let _ = sock.set_nodelay(true);
        if sh
            .epoll
            .add(sock.as_raw_fd(), T_PENDING | sock.as_raw_fd() as u64)
            .is_ok()
        {
            pending.push(Pending {
                sock,
                buf: [0; HELLO_LEN],
                got: 0,
                since: Instant::now(),
            });
        }
    }
}

/// Reads `HELLO`s byte-exactly (never past them: what follows belongs to the QP).
fn read_hellos(dev: &Device, sh: &Shared, pending: &mut Vec<Pending>) {
    let mut i = 0;
    while i < pending.len() {
        let p = &mut pending[i];
        let done = match p.sock.read(&mut p.buf[p.got..]) {
            Ok(0) => true,
            Ok(n) => {
                p.got += n;
                p.got == HELLO_LEN
            }
            Err(e) => {
                e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted
            }
        };
        if !done {
            i += 1;
            continue;
        }
        let p = pending.swap_remove(i);
        sh.epoll.remove(p.sock.as_raw_fd());
        if p.got < HELLO_LEN {
            continue;
        }
        match wire::decode(&p.buf) {
            Ok(Some((
                wire::Frame {
                    body:
                        Body::Hello {
                            gid,
                            src_qpn,
                            dst_qpn,
                            host,
                            listener,
                        },
                    ..
                },
                _,
            ))) => {
                let hint = rc::ShmHint { host, listener };
                route(dev, Gid(gid), src_qpn, dst_qpn, hint, p.sock)
            }
            _ => bump(&dev.stats.rc_frames_malformed),
        }
    }
}

/// Hands a connection to the QP expecting it, or parks it. The QP lock is held while
/// parking, so a QP reaching RTR at the same time (which claims under its lock) cannot
/// miss it.
fn route(dev: &Device, gid: Gid, src_qpn: u32, dst_qpn: u32, hint: rc::ShmHint, sock: TcpStream) {
    let qp = dev.lookup_qp(dst_qpn);
    let mut guard = qp.as_ref().map(|q| q.lock());
    if let (Some(qp), Some(g)) = (qp.as_ref(), guard.as_mut()) {
        // A QP already in ERR takes its connection too, so that it can tell the peer.
        let ready = matches!(
            g.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err
        );
        if let Some(rc) = g.rc.as_mut() {
            if ready
                && !rc.st.connector
                && rc.link.is_none()
                && rc.st.peer_gid == gid
                && rc.st.peer_qpn == src_qpn
            {
                rc::attach(qp, rc, rc::tcp_link(sock), Some(hint));
                qp.defer();
                return;
            }
        }
    }
    let mut parked = dev.parked.lock().unwrap_or_else(|e| e.into_inner());
    if parked.len() < MAX_PENDING {
        parked.push(Parked {
            hint,
            gid,
            src_qpn,
            dst_qpn,
            sock,
            since: Instant::now(),
        });
    }
    drop(parked);
    drop(guard);
}

/// A parked connection from `(gid, peer_qpn)` for QP `qpn`, if one arrived early.
/// Called with that QP's lock held.
pub(crate) fn claim(
    dev: &Device,
    qpn: u32,
    gid: Gid,
    peer_qpn: u32,
) -> Option<(TcpStream, rc::ShmHint)> {
    let mut parked = dev.parked.lock().unwrap_or_else(|e| e.into_inner());
    let i = parked
        .iter()
        .position(|p| p.dst_qpn == qpn && p.gid == gid && p.src_qpn == peer_qpn)?;
    let p = parked.swap_remove(i);
    Some((p.sock, p.hint))
}
