//! End-to-end smoke tests through the neutral API: two soft devices in one process.
//! Waiting is polling with a deadline, never sleeping.

use std::time::{Duration, Instant};

use crate::{
    AccessFlags, AhAttr, CompletionQueue, Device, MemoryRegion, Mtu, ProtectionDomain, QpAttr,
    QpInitAttr, QpState, QpType, QueuePair, RecvWr, SendWr, SoftConfig, SoftLink, SoftStats,
    WorkCompletion,
};

mod acks;
mod alloc;
mod bulk;
mod compact;
mod direct;
mod doorbells;
mod errors;
mod ib;
mod idle_receives;
mod killed_responder;
mod lent;
mod rc;
mod shm;
mod slow_peer;
mod srq_cq;
mod ud;
mod ud_many;
mod wildcard;

const ALL: AccessFlags = AccessFlags::all();

/// Test bytes that differ at every offset of a ring chunk and from chunk to chunk
/// (also `shm::split_copy`'s tests).
pub(super) fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) % 251) as u8)
        .collect()
}

/// Posts `n` receives of `len` bytes each to `srq`, back to back from the start of
/// `mr`; receive `i` has `wr_id` `i`.
fn post_srq_slots(srq: &crate::SharedReceiveQueue, mr: &MemoryRegion, n: usize, len: usize) {
    let sges: Vec<_> = (0..n).map(|i| [mr.sge(i * len, len as u32)]).collect();
    let wrs: Vec<_> = sges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr {
            wr_id: i as u64,
            sg_list: s,
        })
        .collect();
    // SAFETY: the MR outlives the SRQ's use of it.
    unsafe { srq.post_recv(&wrs) }.unwrap();
}

/// An RC QP on `spd` that takes its receives from `srq` (completions on `scq`),
/// connected to a plain RC QP on `cpd` (completions on `ccq`): (server, client).
fn srq_pair(
    (spd, scq, srq): (
        &ProtectionDomain,
        &CompletionQueue,
        &crate::SharedReceiveQueue,
    ),
    (cpd, ccq): (&ProtectionDomain, &CompletionQueue),
) -> (QueuePair, QueuePair) {
    let mut init = QpInitAttr::new(QpType::Rc, scq, scq);
    init.srq = Some(srq);
    let sqp = spd.create_qp(&init).unwrap();
    let cqp = cpd
        .create_qp(&QpInitAttr::new(QpType::Rc, ccq, ccq))
        .unwrap();
    let (se, ce) = (sqp.endpoint(0).unwrap(), cqp.endpoint(0).unwrap());
    sqp.connect_rc(&ce, 0, ALL).unwrap();
    cqp.connect_rc(&se, 0, ALL).unwrap();
    (sqp, cqp)
}

struct Side {
    dev: Device,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn side(qp_type: QpType) -> Side {
    side_with(qp_type, SoftConfig::default())
}

/// A side on a device opened with `config`.
fn side_with(qp_type: QpType, config: SoftConfig) -> Side {
    let dev = Device::open_soft(config).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(qp_type, &cq, &cq)).unwrap();
    let mr = pd.alloc_mr(4096, ALL).unwrap();
    Side {
        dev,
        pd,
        cq,
        qp,
        mr,
    }
}

/// A side on a device whose RC QPs use `link`.
fn side_on(link: SoftLink) -> Side {
    let config = SoftConfig {
        link,
        ..SoftConfig::default()
    };
    side_with(QpType::Rc, config)
}

fn stats(s: &Side) -> SoftStats {
    s.dev.soft_stats().expect("a soft device")
}

/// A connected pair (`a` on `la`, `b` on `lb`) whose outputs both write rings: Sends
/// each way until both switched (a side's output moves with the first bytes it writes
/// after the handshake).
fn pair_on_rings(la: SoftLink, lb: SoftLink) -> (Side, Side) {
    let (a, b) = (side_on(la), side_on(lb));
    connect(&a, &b, 7, 1, 14);
    connect(&b, &a, 7, 1, 14);
    shm::until_on_rings(&a, &b);
    (a, b)
}

/// RESET → RTS with explicit RNR settings.
fn connect(s: &Side, peer: &Side, rnr_retry: u8, min_rnr_timer: u8, timeout: u8) {
    let remote = peer.qp.endpoint(0).unwrap();
    s.qp.modify(QpState::Init, &QpAttr::rc_init(ALL)).unwrap();
    let mut rtr = QpAttr::rc_rtr(
        AhAttr::from_endpoint(&remote, 0),
        remote.qpn,
        0,
        Mtu::Mtu4096,
    );
    rtr.min_rnr_timer = Some(min_rnr_timer);
    s.qp.modify(QpState::Rtr, &rtr).unwrap();
    let mut rts = QpAttr::rc_rts(0);
    rts.rnr_retry = Some(rnr_retry);
    rts.timeout = Some(timeout);
    s.qp.modify(QpState::Rts, &rts).unwrap();
}

fn rc_pair() -> (Side, Side) {
    let (a, b) = (side(QpType::Rc), side(QpType::Rc));
    connect(&a, &b, 7, 1, 14);
    connect(&b, &a, 7, 1, 14);
    (a, b)
}

/// Polls `cq` (and drives `others`, popping nothing from them) until one completion.
fn wait(cq: &CompletionQueue, others: &[&CompletionQueue]) -> WorkCompletion {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [WorkCompletion::default()];
    loop {
        for o in others {
            let _ = o.poll(&mut []);
        }
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(Instant::now() < deadline, "no completion within 10 s");
        std::thread::yield_now();
    }
}

/// Drives `cqs` (popping nothing) until `done`; fails with `what()` after 10 s.
fn poll_until(cqs: &[&CompletionQueue], mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        for cq in cqs {
            let _ = cq.poll(&mut []);
        }
        assert!(Instant::now() < deadline, "{}", what());
        std::thread::yield_now();
    }
}

/// Runs `f` to its end on a current-thread tokio runtime (timers and I/O on): the
/// async waits of a CQ (`poll_async`, `wait_async`) under test.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn post_recv(s: &Side, wr_id: u64, off: usize, len: u32) {
    post_recv_into(s, &s.mr, wr_id, off, len);
}

/// Posts a receive of `len` bytes at `off` of `mr` on `s`.
fn post_recv_into(s: &Side, mr: &MemoryRegion, wr_id: u64, off: usize, len: u32) {
    let sge = [mr.sge(off, len)];
    // SAFETY: the MR outlives the test and is not touched until completion.
    unsafe {
        s.qp.post_recv(&[RecvWr {
            wr_id,
            sg_list: &sge,
        }])
    }
    .unwrap();
}

/// A small Send from `a` still reaches `b` (after bulk traffic, say).
fn small_send_flows(a: &Side, b: &Side) {
    post_recv(b, 1, 0, 64);
    a.mr.write(0, b"after it");
    post(a, SendWr::new(2, crate::SendOp::Send, &[a.mr.sge(0, 8)]));
    assert_eq!(wait(&b.cq, &[&a.cq]).status, crate::WcStatus::Success);
    assert_eq!(b.mr.to_vec(0, 8), b"after it");
}

fn post(s: &Side, wr: SendWr<'_>) {
    // SAFETY: as above.
    unsafe { s.qp.post_send(&[wr]) }.unwrap();
}
