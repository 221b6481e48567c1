//! Shared receive queues: one pool of receives feeding many QPs, and its low-watermark
//! event.

use rpc_transport::{
    AsyncEvent, CompletionQueue, MemoryRegion, QueuePair, RecvWr, SendOp, SendWr,
    SharedReceiveQueue, SrqInitAttr, WcStatus,
};

use crate::common::rc::{connect_pair, create_rc_qp, PSN_A, PSN_B};
use crate::common::wait::drain_events;
use crate::common::{post_send, wait_event, wait_wc, wait_wcs, Host, RcOpts};

const SLOT: usize = 64;

/// `n` requester QPs on host `a`, each connected to its own QP on host `b`; all of
/// `b`'s QPs take their receives from one SRQ and complete on one CQ.
struct SrqRig {
    qas: Vec<QueuePair>,
    qbs: Vec<QueuePair>,
    srq: SharedReceiveQueue,
    a_scq: CompletionQueue,
    b_rcq: CompletionQueue,
    _cqs: [CompletionQueue; 2],
    a: Host,
    b: Host,
}

impl SrqRig {
    fn new(n: usize, srq_attr: SrqInitAttr) -> SrqRig {
        let opts = RcOpts::default();
        let (a, b) = (Host::open(), Host::open());
        let (a_scq, a_rcq) = (a.cq(256), a.cq(256));
        let (b_scq, b_rcq) = (b.cq(256), b.cq(256));
        let srq = b.pd.create_srq(&srq_attr).expect("ibv_create_srq");
        let qas: Vec<_> = (0..n)
            .map(|_| create_rc_qp(&a, &a_scq, &a_rcq, None, &opts))
            .collect();
        let qbs: Vec<_> = (0..n)
            .map(|_| create_rc_qp(&b, &b_scq, &b_rcq, Some(&srq), &opts))
            .collect();
        for (i, (qa, qb)) in qas.iter().zip(&qbs).enumerate() {
            connect_pair(qa, PSN_A + i as u32, qb, PSN_B + i as u32, &opts);
        }
        SrqRig {
            qas,
            qbs,
            srq,
            a_scq,
            b_rcq,
            _cqs: [a_rcq, b_scq],
            a,
            b,
        }
    }

    /// Posts one SRQ receive per slot of `pool`, with the slot index as `wr_id`.
    fn post_pool(&self, pool: &MemoryRegion, slots: std::ops::Range<usize>) {
        for i in slots {
            let sge = [pool.sge(i * SLOT, SLOT as u32)];
            let wr = RecvWr {
                wr_id: i as u64,
                sg_list: &sge,
            };
            // SAFETY: `pool` outlives the rig's use and each slot is read only after
            // its receive completed.
            unsafe { self.srq.post_recv(&[wr]) }.expect("ibv_post_srq_recv");
        }
    }

    /// Sends one message `[qp index, seq]` from requester `i` and waits for its
    /// completion.
    fn send_from(&self, i: usize, seq: u8, src: &MemoryRegion) {
        let off = i * SLOT;
        src.write(off, &[i as u8, seq]);
        let sge = [src.sge(off, 2)];
        // SAFETY: this slot of `src` is unchanged until the completion below.
        unsafe { post_send(&self.qas[i], SendWr::new(seq.into(), SendOp::Send, &sge)) };
        let wc = wait_wc(&self.a_scq, "a send to the SRQ side");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
}

#[test]
fn one_srq_feeds_receives_to_many_qps() {
    const QPS: usize = 4;
    const PER_QP: usize = 3;
    let rig = SrqRig::new(QPS, SrqInitAttr::default());
    let pool = rig.b.mr_all(QPS * PER_QP * SLOT);
    let src = rig.a.mr_all(QPS * SLOT);
    rig.post_pool(&pool, 0..QPS * PER_QP);
    // Interleave the senders so the pool is shared, not carved per QP.
    for seq in 0..PER_QP as u8 {
        for i in (0..QPS).rev() {
            rig.send_from(i, seq, &src);
        }
    }

    let wcs = wait_wcs(&rig.b_rcq, QPS * PER_QP, "every SRQ receive");
    let mut seen = vec![Vec::new(); QPS];
    let mut slots: Vec<u64> = Vec::new();
    for wc in &wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        let msg = pool.to_vec(wc.wr_id as usize * SLOT, 2);
        let from = msg[0] as usize;
        assert_eq!(
            wc.qp_num,
            rig.qbs[from].qp_num(),
            "completion names the QP the message arrived on"
        );
        seen[from].push(msg[1]);
        slots.push(wc.wr_id);
    }
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(s, &[0, 1, 2], "QP {i}: messages lost, doubled or reordered");
    }
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), QPS * PER_QP, "one SRQ receive used twice");
}

#[test]
fn srq_limit_event_fires_once_below_the_limit() {
    let rig = SrqRig::new(1, SrqInitAttr::default());
    let pool = rig.b.mr_all(8 * SLOT);
    let src = rig.a.mr_all(SLOT);
    let is_limit = |ev: &AsyncEvent| matches!(ev, AsyncEvent::SrqLimitReached(_));
    rig.post_pool(&pool, 0..4);
    rig.srq.arm_limit(3).expect("ibv_modify_srq(IBV_SRQ_LIMIT)");

    // 4 -> 3 posted receives: not below the limit yet.
    rig.send_from(0, 0, &src);
    wait_wc(&rig.b_rcq, "first SRQ receive");
    let early: Vec<_> = drain_events(&rig.b.dev)
        .into_iter()
        .filter(is_limit)
        .collect();
    assert!(early.is_empty(), "limit event at 3 of limit 3: {early:?}");

    // 3 -> 2: below the limit.
    rig.send_from(0, 1, &src);
    wait_wc(&rig.b_rcq, "second SRQ receive");
    let ev = wait_event(&rig.b.dev, "SRQ limit reached", is_limit);
    assert_eq!(ev, AsyncEvent::SrqLimitReached(rig.srq.id()));

    // The event disarmed the limit: 2 -> 1 raises nothing.
    rig.send_from(0, 2, &src);
    wait_wc(&rig.b_rcq, "third SRQ receive");
    let again: Vec<_> = drain_events(&rig.b.dev)
        .into_iter()
        .filter(is_limit)
        .collect();
    assert!(again.is_empty(), "limit event after it disarmed: {again:?}");
}
