//! The device's one helper thread: what must happen while nobody polls.
//!
//! * Accepting RC connections and routing each, by its `HELLO`, to the QP that
//!   expects that peer (or parking it until that QP reaches RTR).
//! * Progress for CQs nobody has polled for [`IDLE_NS`]: the target of an RDMA Write,
//!   Read or atomic whose application sleeps, RNR retries, owed ACKs, the retry budget.
//!
//! It never wakes per message while the application polls: its epoll set holds only
//! the listener, half-open connections and a wake-up eventfd, and otherwise it ticks
//! once a millisecond (only while the device has QPs), checking "last polled" stamps.
//! It holds the device by `Weak` and exits when the device is dropped.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::addr::Gid;
use crate::qp_state::QpState;

use super::cq::Cq;
use super::device::{bump, Device};
use super::rc;
use super::sys::{self, Epoll, EventFd};
use super::wire::{self, Body, HELLO_LEN};

/// A CQ not polled for this long gets progress from the helper.
pub(crate) const IDLE_NS: u64 = 1_000_000;
const TICK_MS: i32 = 1;
const IDLE_TICK_MS: i32 = 100;
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
const PARK_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_PENDING: usize = 4096;

const T_WAKE: u64 = u64::MAX;
const T_LISTEN: u64 = u64::MAX - 1;

/// What the device and its helper share; outlives both, so the helper never waits on
/// a descriptor the device has closed.
pub(crate) struct Shared {
    epoll: Epoll,
    wake: EventFd,
    stop: AtomicBool,
}

impl Shared {
    pub(crate) fn new() -> io::Result<Shared> {
        let s = Shared {
            epoll: Epoll::new()?,
            wake: EventFd::new()?,
            stop: AtomicBool::new(false),
        };
        s.epoll.add(s.wake.raw(), T_WAKE)?;
        Ok(s)
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake.signal();
    }
}

/// An accepted connection whose QP is not ready for it yet.
pub(crate) struct Parked {
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
    let weak = Arc::downgrade(dev);
    std::thread::Builder::new()
        .name("soft-rdma-helper".into())
        .spawn(move || run(weak, sh))?;
    Ok(())
}

fn run(weak: Weak<Device>, sh: Arc<Shared>) {
    let mut evs = sys::events::<32>();
    let mut pending: Vec<Pending> = Vec::new();
    let mut cqs: Vec<Weak<Cq>> = Vec::new();
    loop {
        let busy = match weak.upgrade() {
            None => return,
            Some(d) => {
                !d.qps.read().unwrap_or_else(|e| e.into_inner()).is_empty()
                    || !pending.is_empty()
                    || !d
                        .parked
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .is_empty()
            }
        };
        let n = sh
            .epoll
            .wait(&mut evs, if busy { TICK_MS } else { IDLE_TICK_MS })
            .len();
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let Some(dev) = weak.upgrade() else { return };
        if n > 0 {
            sh.wake.drain();
            accept_all(&dev, &sh, &mut pending);
            read_hellos(&dev, &sh, &mut pending);
        }
        pending.retain(|p| {
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
        let now = dev.now_ns();
        cqs.clear();
        cqs.extend(
            dev.cqs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        for w in &cqs {
            if let Some(cq) = w.upgrade() {
                if now.saturating_sub(cq.last_poll()) > IDLE_NS {
                    cq.progress(now, true);
                }
            }
        }
        dev.ud_release_held(now);
    }
}

fn accept_all(dev: &Device, sh: &Shared, pending: &mut Vec<Pending>) {
    while let Ok((sock, _)) = dev.listener.accept() {
        if pending.len() >= MAX_PENDING || sock.set_nonblocking(true).is_err() {
            continue;
        }
        let _ = sock.set_nodelay(true);
        if sh
            .epoll
            .add(sock.as_raw_fd(), sock.as_raw_fd() as u64)
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
                        },
                    ..
                },
                _,
            ))) => route(dev, Gid(gid), src_qpn, dst_qpn, p.sock),
            _ => bump(&dev.stats.rc_frames_malformed),
        }
    }
}

/// Hands a connection to the QP expecting it, or parks it. The QP lock is held while
/// parking, so a QP reaching RTR at the same time (which claims under its lock) cannot
/// miss it.
fn route(dev: &Device, gid: Gid, src_qpn: u32, dst_qpn: u32, sock: TcpStream) {
    let qp = dev.lookup_qp(dst_qpn);
    let mut guard = qp.as_ref().map(|q| q.lock());
    if let (Some(qp), Some(g)) = (qp.as_ref(), guard.as_mut()) {
        let ready = matches!(
            g.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        );
        if let Some(rc) = g.rc.as_deref_mut() {
            if ready
                && !rc.st.connector
                && rc.sock.is_none()
                && rc.st.peer_gid == gid
                && rc.st.peer_qpn == src_qpn
            {
                rc::attach(qp, rc, sock);
                qp.defer();
                return;
            }
        }
    }
    let mut parked = dev.parked.lock().unwrap_or_else(|e| e.into_inner());
    if parked.len() < MAX_PENDING {
        parked.push(Parked {
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
pub(crate) fn claim(dev: &Device, qpn: u32, gid: Gid, peer_qpn: u32) -> Option<TcpStream> {
    let mut parked = dev.parked.lock().unwrap_or_else(|e| e.into_inner());
    let i = parked
        .iter()
        .position(|p| p.dst_qpn == qpn && p.gid == gid && p.src_qpn == peer_qpn)?;
    Some(parked.swap_remove(i).sock)
}
