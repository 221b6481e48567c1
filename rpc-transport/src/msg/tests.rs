//! The message layer over the soft provider: two devices in one process, waiting by
//! polling with a deadline (never sleeping).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{RecvPool, RecvSlot, RecvTarget, SendRing};
use crate::{
    AccessFlags, CompletionQueue, Device, ProtectionDomain, QpCap, QpInitAttr, QpType, QueuePair,
    SharedReceiveQueue, SoftConfig, SoftProfile, SrqInitAttr, WcOpcode, WorkCompletion,
};

pub(super) struct Side {
    pub(super) pd: ProtectionDomain,
    pub(super) cq: Arc<CompletionQueue>,
    pub(super) dev: Device,
}

fn side() -> Side {
    side_with(SoftProfile::Full)
}

/// A soft device with `profile` (whatever the environment says), a PD and a CQ.
pub(super) fn side_with(profile: SoftProfile) -> Side {
    let dev = Device::open_soft_with(SoftConfig::default(), profile).unwrap();
    Side {
        pd: dev.alloc_pd().unwrap(),
        cq: Arc::new(dev.create_cq(256).unwrap()),
        dev,
    }
}

pub(super) fn qp(s: &Side, srq: Option<&SharedReceiveQueue>) -> Arc<QueuePair> {
    let mut init = QpInitAttr::new(QpType::Rc, &s.cq, &s.cq);
    init.srq = srq;
    init.cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    Arc::new(s.pd.create_qp(&init).unwrap())
}

pub(super) fn connect(a: &QueuePair, b: &QueuePair) {
    let (ea, eb) = (a.endpoint(1).unwrap(), b.endpoint(2).unwrap());
    a.connect_rc(&eb, 1, AccessFlags::empty()).unwrap();
    b.connect_rc(&ea, 2, AccessFlags::empty()).unwrap();
}

/// A reader and a lender on two soft devices, their RC QPs connected; the
/// lender's QP accepts `lender_access` (RDMA Read, Write) from the reader.
pub(super) fn reader_and_lender(
    lender_access: AccessFlags,
) -> (Side, Side, Arc<QueuePair>, Arc<QueuePair>) {
    let (reader, lender) = (side_with(SoftProfile::Full), side_with(SoftProfile::Full));
    let (qr, ql) = (qp(&reader, None), qp(&lender, None));
    let (er, el) = (qr.endpoint(1).unwrap(), ql.endpoint(2).unwrap());
    qr.connect_rc(&el, 1, AccessFlags::empty()).unwrap();
    ql.connect_rc(&er, 2, lender_access).unwrap();
    (reader, lender, qr, ql)
}

/// Polls `cq` (driving `other` too) until a completion comes.
pub(super) fn next(cq: &CompletionQueue, other: &CompletionQueue) -> WorkCompletion {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [WorkCompletion::default()];
    loop {
        let _ = other.poll(&mut []);
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(Instant::now() < deadline, "no completion within 10 s");
        std::thread::yield_now();
    }
}

#[test]
fn slots_cycle_through_send_ring_and_receive_pool_with_selective_signaling() {
    let (a, b) = (side(), side());
    let (qa, qb) = (qp(&a, None), qp(&b, None));
    connect(&qa, &qb);
    let reposts = Arc::new(AtomicU32::new(0));
    let hook = {
        let r = reposts.clone();
        Box::new(move |n: u32| {
            r.fetch_add(n, Ordering::Relaxed);
        })
    };
    let pool = RecvPool::new(&b.pd, RecvTarget::Qp(qb.clone()), 8, 1024, Some(hook)).unwrap();
    let mut ring = SendRing::new(&a.pd, qa.clone(), 8, 1024).unwrap();

    // Four times as many messages as slots: slots must come back to be reused.
    for i in 0..32u32 {
        let slot = loop {
            if let Some(s) = ring.acquire() {
                break s;
            }
            let wc = next(&a.cq, &b.cq);
            assert!(wc.is_ok(), "{wc:?}");
            ring.handle_completion(&wc);
        };
        let len = if i % 2 == 0 { 40 } else { 900 }; // inline and not
        ring.buf(&slot)[..len].fill(i as u8);
        ring.post(slot, len, 0x100 + i).unwrap();

        let wc = next(&b.cq, &a.cq);
        assert_eq!(wc.opcode, WcOpcode::Recv);
        assert_eq!(wc.imm_data, Some(0x100 + i));
        let got: RecvSlot = pool.complete(&wc).unwrap();
        assert_eq!(got.len(), len);
        assert!(got.bytes().iter().all(|&x| x == i as u8));
        drop(got); // reposts the receive
    }
    assert_eq!(reposts.load(Ordering::Relaxed), 32);
    assert_eq!(pool.reposted(), 32);
    // Every slot is free or awaiting the signaled completion that covers it.
    assert!(ring.free_slots() + ring.in_flight() == 8);
}

#[test]
fn one_srq_pool_serves_two_connections_and_batches_reposts() {
    let (srv, c1, c2) = (side(), side(), side());
    let srq = Arc::new(
        srv.pd
            .create_srq(&SrqInitAttr {
                max_wr: 16,
                max_sge: 1,
                srq_limit: 0,
            })
            .unwrap(),
    );
    let pool = RecvPool::new(&srv.pd, RecvTarget::Srq(srq.clone()), 16, 512, None).unwrap();
    let (s1, s2) = (qp(&srv, Some(&srq)), qp(&srv, Some(&srq)));
    let (q1, q2) = (qp(&c1, None), qp(&c2, None));
    connect(&q1, &s1);
    connect(&q2, &s2);
    let mut r1 = SendRing::new(&c1.pd, q1.clone(), 4, 512).unwrap();
    let mut r2 = SendRing::new(&c2.pd, q2.clone(), 4, 512).unwrap();
    for (ring, tag) in [(&mut r1, 1u8), (&mut r2, 2u8)] {
        for _ in 0..4 {
            let s = ring.acquire().unwrap();
            ring.buf(&s)[0] = tag;
            ring.post(s, 1, u32::from(tag)).unwrap();
        }
        assert!(ring.acquire().is_none(), "all four slots in flight");
    }
    let mut held = Vec::new();
    let batch = pool.batch();
    for _ in 0..8 {
        let wc = next(&srv.cq, &c1.cq);
        let _ = c2.cq.poll(&mut []);
        let slot = pool.complete(&wc).unwrap();
        let from = if wc.qp_num == s1.qp_num() { 1 } else { 2 };
        assert_eq!(slot.bytes(), &[from]);
        assert_eq!(wc.imm_data, Some(u32::from(from)));
        held.push(slot);
    }
    // A slot handed to another thread (a handler's) and dropped there is reposted
    // at once: that thread may answer its frame next, and the batch would repost
    // it only after that answer had returned the frame's credit.
    let elsewhere = held.pop().unwrap();
    std::thread::spawn(move || drop(elsewhere)).join().unwrap();
    assert_eq!(pool.reposted(), 1, "a slot dropped on another thread");
    drop(held);
    assert_eq!(
        pool.reposted(),
        1,
        "reposts on the batch's thread wait for it"
    );
    drop(batch);
    assert_eq!(pool.reposted(), 8, "one flush at the end of the batch");
}

#[test]
fn a_slot_left_for_later_waits_for_the_next_flush_and_never_two_wait() {
    let (a, b) = (side(), side());
    let (qa, qb) = (qp(&a, None), qp(&b, None));
    connect(&qa, &qb);
    let pool = RecvPool::new(&b.pd, RecvTarget::Qp(qb.clone()), 4, 512, None).unwrap();
    let mut ring = SendRing::new(&a.pd, qa.clone(), 4, 512).unwrap();
    let mut got = Vec::new();
    for i in 0..3u32 {
        let s = ring.acquire().unwrap();
        ring.post(s, 1, i + 1).unwrap();
        let wc = next(&b.cq, &a.cq);
        got.push(pool.complete(&wc).unwrap());
    }
    let later = |mut slot: RecvSlot| {
        slot.repost_later();
        drop(slot);
    };
    later(got.remove(0));
    assert_eq!(pool.reposted(), 0, "left for the next flush");
    assert!(pool.flush_deferred());
    assert_eq!(pool.reposted(), 1, "posted by flush_deferred");
    assert!(!pool.flush_deferred());
    assert_eq!(pool.reposted(), 1, "nothing more was waiting");
    later(got.remove(0));
    assert_eq!(pool.reposted(), 1);
    later(got.remove(0));
    assert_eq!(
        pool.reposted(),
        3,
        "a second one posts both: one waits at most"
    );
}

#[test]
fn a_corked_ring_holds_posts_and_uncork_sends_them_in_order() {
    let (a, b) = (side(), side());
    let wide = |s: &Side| {
        let mut init = QpInitAttr::new(QpType::Rc, &s.cq, &s.cq);
        init.cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        Arc::new(s.pd.create_qp(&init).unwrap())
    };
    let (qa, qb) = (wide(&a), wide(&b));
    connect(&qa, &qb);
    let pool = RecvPool::new(&b.pd, RecvTarget::Qp(qb.clone()), 64, 256, None).unwrap();
    let mut ring = SendRing::new(&a.pd, qa.clone(), 48, 256).unwrap();

    // More frames than one post list holds, so uncork posts several lists.
    ring.cork();
    for i in 0..40u32 {
        let slot = ring.acquire().unwrap();
        ring.buf(&slot)[..4].copy_from_slice(&i.to_be_bytes());
        ring.post(slot, if i % 2 == 0 { 4 } else { 200 }, i)
            .unwrap();
    }
    assert_eq!(ring.free_slots(), 8, "held posts keep their slots");
    // Held frames never reached the QP: polls on both sides find nothing.
    let mut wc = [WorkCompletion::default(); 4];
    for _ in 0..100 {
        assert_eq!(a.cq.poll(&mut wc).unwrap(), 0);
        assert_eq!(b.cq.poll(&mut wc).unwrap(), 0);
    }
    ring.uncork().unwrap();
    for i in 0..40u32 {
        let wc = next(&b.cq, &a.cq);
        assert_eq!(wc.imm_data, Some(i), "frames arrive in post order");
        let got = pool.complete(&wc).unwrap();
        assert_eq!(got.bytes()[..4], i.to_be_bytes());
    }
    // Slots come back through the signaled completions (one in twelve: the 36 frames
    // up to the last signaled one); the 4 after it wait for a later one.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ring.free_slots() < 44 {
        let _ = b.cq.poll(&mut []);
        if a.cq.poll(&mut wc[..1]).unwrap() == 1 {
            assert!(wc[0].is_ok(), "{:?}", wc[0]);
            ring.handle_completion(&wc[0]);
        }
        assert!(Instant::now() < deadline, "slots did not come back");
    }
    assert_eq!(ring.in_flight(), 4);
    // Uncorked, a post goes out at once.
    let slot = ring.acquire().unwrap();
    ring.post(slot, 4, 99).unwrap();
    assert_eq!(next(&b.cq, &a.cq).imm_data, Some(99));
}

#[test]
fn a_grown_ring_and_pool_carry_messages_in_their_new_slots_too() {
    let (a, b) = (side(), side());
    let (qa, qb) = (qp(&a, None), qp(&b, None));
    connect(&qa, &qb);
    let pool = RecvPool::new(&b.pd, RecvTarget::Qp(qb.clone()), 2, 512, None).unwrap();
    let mut ring = SendRing::new(&a.pd, qa.clone(), 2, 512).unwrap();
    pool.grow(&b.pd, 6).unwrap();
    ring.grow(&a.pd, 6).unwrap();
    assert_eq!((pool.capacity(), ring.capacity()), (8, 8));
    assert!(
        ring.grow(&a.pd, 9).is_err(),
        "never beyond the QP's send WRs"
    );
    // Eight messages in flight at once: they need the new receives and slots.
    let slots: Vec<_> = (0..8).map(|_| ring.acquire().expect("8 slots")).collect();
    for (i, s) in slots.into_iter().enumerate() {
        ring.buf(&s)[..300].fill(i as u8);
        ring.post(s, 300, i as u32).unwrap();
    }
    let mut held = Vec::new();
    for _ in 0..8 {
        let wc = next(&b.cq, &a.cq);
        assert!(wc.is_ok(), "{wc:?}");
        let got = pool.complete(&wc).unwrap();
        let i = wc.imm_data.unwrap() as u8;
        assert!(got.bytes().iter().all(|&x| x == i), "message {i} intact");
        held.push(got);
    }
}
