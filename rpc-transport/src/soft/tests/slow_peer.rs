//! The retry budget against a peer that is slow but alive, and one that stalls: a
//! Send through a TCP relay that forwards the sender's bytes at a capped rate, so the
//! transfer outlasts the budget while each step is far inside it.
//!
//! The relay's pacing models the slow peer (the budget is wall-clock time, so the slow
//! peer must be slow in wall-clock time too); nothing waits on it for an outcome: the
//! tests wait for completions, with a deadline.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{side_with, Side, ALL};
use crate::{
    AhAttr, Gid, Mtu, QpAttr, QpEndpoint, QpState, QpType, RecvWr, SendOp, SendWr, SoftConfig,
    SoftLink, WcStatus, WorkCompletion,
};

/// Bytes the relay forwards per step, and the pause between steps: 1.6 MB/s.
const STEP: usize = 32 * 1024;
const STEP_PAUSE: Duration = Duration::from_millis(20);
/// The Send: about 1.9 s through the relay, past the 1 s budget (`timeout` 1 is
/// raised to the provider's floor).
const LEN: usize = 3 << 20;

/// Forwards one accepted connection to `to`: peer → sender at once, sender → peer
/// [`STEP`] bytes per [`STEP_PAUSE`], and nothing past `cap` bytes (a stalled peer).
struct Relay {
    addr: SocketAddrV4,
    stop: Arc<AtomicBool>,
    forwarded: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    fn start(listener: TcpListener, to: SocketAddrV4, cap: usize) -> Relay {
        let addr = match listener.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            a => panic!("relay bound {a}"),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let forwarded = Arc::new(AtomicUsize::new(0));
        let (s, f) = (stop.clone(), forwarded.clone());
        let thread = std::thread::spawn(move || relay(listener, to, cap, &s, &f));
        Relay {
            addr,
            stop,
            forwarded,
            thread: Some(thread),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let r = t.join();
            if !std::thread::panicking() {
                r.unwrap();
            }
        }
    }
}

fn relay(
    listener: TcpListener,
    to: SocketAddrV4,
    cap: usize,
    stop: &AtomicBool,
    fwd: &AtomicUsize,
) {
    listener.set_nonblocking(true).unwrap();
    let tick = Duration::from_millis(5);
    let from = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::park_timeout(tick);
            }
            Err(e) => panic!("relay accept: {e}"),
        }
    };
    from.set_nonblocking(false).unwrap();
    let back = TcpStream::connect(to).unwrap();
    let _ = back.set_nodelay(true);
    let _ = from.set_nodelay(true);
    // The peer's frames (ACKs) go back unhindered.
    let (mut b_rd, mut f_wr) = (back.try_clone().unwrap(), from.try_clone().unwrap());
    b_rd.set_read_timeout(Some(tick)).unwrap();
    let stop_back = Arc::new(AtomicBool::new(false));
    let sb = stop_back.clone();
    let back_thread = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while !sb.load(Ordering::Relaxed) {
            match b_rd.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if f_wr.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return,
            }
        }
    });
    let (mut f_rd, mut b_wr) = (from, back);
    f_rd.set_read_timeout(Some(tick)).unwrap();
    let mut buf = vec![0u8; STEP];
    while !stop.load(Ordering::Relaxed) {
        let room = STEP.min(cap - fwd.load(Ordering::Relaxed));
        if room == 0 {
            std::thread::park_timeout(tick); // stalled: take nothing more
            continue;
        }
        match f_rd.read(&mut buf[..room]) {
            Ok(0) => break,
            Ok(n) => {
                if b_wr.write_all(&buf[..n]).is_err() {
                    break;
                }
                fwd.fetch_add(n, Ordering::Relaxed);
                // The slow peer's pace (see the module docs).
                std::thread::sleep(STEP_PAUSE);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    stop_back.store(true, Ordering::Relaxed);
    back_thread.join().unwrap();
}

fn port(s: &Side) -> u16 {
    s.qp.endpoint(0).unwrap().gid.soft_addr().unwrap().port()
}

/// Two TCP-only sides, the sender connecting to the receiver through a relay, and an
/// MR of [`LEN`] on each: (sender, receiver, relay).
///
/// The side with the larger GID connects, and a soft GID starts with the port: so the
/// sender is the side with the larger port, and the relay needs a port below it.
fn relayed_pair(cap: usize) -> (Side, Side, Relay, crate::MemoryRegion, crate::MemoryRegion) {
    let cfg = || SoftConfig {
        link: SoftLink::Tcp,
        ..SoftConfig::default()
    };
    let (x, y) = (side_with(QpType::Rc, cfg()), side_with(QpType::Rc, cfg()));
    let (s, r) = if port(&x) > port(&y) { (x, y) } else { (y, x) };
    let listener = (0..200)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap())
        .find(|l| l.local_addr().unwrap().port() < port(&s))
        .expect("no relay port below the sender's in 200 tries");
    let r_addr = r.qp.endpoint(0).unwrap().gid.soft_addr().unwrap();
    let relay = Relay::start(listener, r_addr, cap);
    let mut r_via_relay = r.qp.endpoint(0).unwrap();
    r_via_relay.gid = Gid::soft(relay.addr);
    connect_to(&s, &r_via_relay);
    connect_to(&r, &s.qp.endpoint(0).unwrap());
    let (ms, mr) = (
        s.pd.alloc_mr(LEN, ALL).unwrap(),
        r.pd.alloc_mr(LEN, ALL).unwrap(),
    );
    (s, r, relay, ms, mr)
}

/// RESET → RTS toward `remote` with the smallest retry budget (`timeout` 1).
fn connect_to(s: &Side, remote: &QpEndpoint) {
    s.qp.modify(QpState::Init, &QpAttr::rc_init(ALL)).unwrap();
    let rtr = QpAttr::rc_rtr(
        AhAttr::from_endpoint(remote, 0),
        remote.qpn,
        0,
        Mtu::Mtu4096,
    );
    s.qp.modify(QpState::Rtr, &rtr).unwrap();
    let mut rts = QpAttr::rc_rts(0);
    rts.timeout = Some(1);
    s.qp.modify(QpState::Rts, &rts).unwrap();
}

/// Drives both sides until the sender's Send completes, within `limit`.
fn sender_completion(s: &Side, r: &Side, limit: Duration) -> WorkCompletion {
    let deadline = Instant::now() + limit;
    let mut wc = [WorkCompletion::default()];
    loop {
        let _ = r.cq.poll(&mut []);
        if s.cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(
            Instant::now() < deadline,
            "no send completion within {limit:?}"
        );
        std::thread::yield_now();
    }
}

fn send_all(s: &Side, r: &Side, ms: &crate::MemoryRegion, mr: &crate::MemoryRegion) {
    transfer(s, r, ms, mr, SendOp::Send);
}

/// Posts [`LEN`] bytes from `ms` to `mr` with `op` (a Send, or a Write into `mr`).
fn transfer(s: &Side, r: &Side, ms: &crate::MemoryRegion, mr: &crate::MemoryRegion, op: SendOp) {
    if matches!(op, SendOp::Send) {
        let sge = [mr.sge(0, LEN as u32)];
        // SAFETY: the MR outlives the QP's use of it.
        unsafe {
            r.qp.post_recv(&[RecvWr {
                wr_id: 1,
                sg_list: &sge,
            }])
        }
        .unwrap();
    }
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    ms.write(0, &data);
    let from = [ms.sge(0, LEN as u32)];
    let wr = SendWr::new(2, op, &from);
    // SAFETY: as above.
    unsafe { s.qp.post_send(&[wr]) }.unwrap();
}

#[test]
fn a_slow_peer_taking_every_byte_outlasts_the_retry_budget() {
    let (s, r, relay, ms, mr) = relayed_pair(usize::MAX);
    send_all(&s, &r, &ms, &mr);
    let started = Instant::now();
    let wc = sender_completion(&s, &r, Duration::from_secs(30));
    assert!(wc.is_ok(), "the slow but live peer failed the Send: {wc:?}");
    // Otherwise the test lost its point: the transfer must have outlasted the budget.
    assert!(
        started.elapsed() > Duration::from_millis(1200),
        "the relay was not slow enough ({:?})",
        started.elapsed()
    );
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    assert!(mr.to_vec(0, LEN) == data, "the received bytes differ");
    assert!(relay.forwarded.load(Ordering::Relaxed) >= LEN);
}

#[test]
fn a_slow_peer_taking_every_byte_of_a_write_outlasts_the_retry_budget() {
    let (s, r, _relay, ms, mr) = relayed_pair(usize::MAX);
    let op = SendOp::RdmaWrite {
        remote_addr: mr.addr(),
        rkey: mr.rkey(),
    };
    transfer(&s, &r, &ms, &mr, op);
    let started = Instant::now();
    let wc = sender_completion(&s, &r, Duration::from_secs(30));
    assert!(
        wc.is_ok(),
        "the slow but live peer failed the Write: {wc:?}"
    );
    assert!(started.elapsed() > Duration::from_millis(1200));
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    assert!(mr.to_vec(0, LEN) == data, "the written bytes differ");
}

#[test]
fn a_peer_that_stops_taking_bytes_still_fails_the_send_after_the_budget() {
    // The relay forwards 256 KiB, then takes nothing more (the peer stays polled).
    const CAP: usize = 256 * 1024;
    let (s, r, relay, ms, mr) = relayed_pair(CAP);
    send_all(&s, &r, &ms, &mr);
    let wc = sender_completion(&s, &r, Duration::from_secs(30));
    assert_eq!(wc.status, WcStatus::RetryExcErr, "{wc:?}");
    // The peer did take bytes at first: its progress ACKs stopped with its intake.
    assert_eq!(relay.forwarded.load(Ordering::Relaxed), CAP);
}
