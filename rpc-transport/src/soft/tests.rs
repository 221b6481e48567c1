//! End-to-end smoke tests through the neutral API: two soft devices in one process.
//! Waiting is polling with a deadline, never sleeping.

use std::time::{Duration, Instant};

use crate::{
    AccessFlags, AhAttr, AsyncEvent, CompletionQueue, Device, Error, MemoryRegion, Mtu,
    ProtectionDomain, QpAttr, QpInitAttr, QpState, QpType, QueuePair, RecvWr, SendFlags, SendOp,
    SendWr, SoftConfig, UdDest, UdFaults, WcOpcode, WcStatus, WorkCompletion, GRH_LEN,
};

const ALL: AccessFlags = AccessFlags::all();

struct Side {
    dev: Device,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn side(qp_type: QpType) -> Side {
    let dev = Device::open_soft(SoftConfig::default()).unwrap();
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

fn post_recv(s: &Side, wr_id: u64, off: usize, len: u32) {
    let sge = [s.mr.sge(off, len)];
    // SAFETY: the MR outlives the test and is not touched until completion.
    unsafe {
        s.qp.post_recv(&[RecvWr {
            wr_id,
            sg_list: &sge,
        }])
    }
    .unwrap();
}

fn post(s: &Side, wr: SendWr<'_>) {
    // SAFETY: as above.
    unsafe { s.qp.post_send(&[wr]) }.unwrap();
}

#[test]
fn send_with_imm_arrives_and_completes_both_sides() {
    let (a, b) = rc_pair();
    post_recv(&b, 7, 100, 64);
    a.mr.write(0, b"hello");
    post(
        &a,
        SendWr::new(1, SendOp::SendWithImm { imm: 0xdead }, &[a.mr.sge(0, 5)]),
    );
    let r = wait(&b.cq, &[&a.cq]);
    assert_eq!(
        (r.status, r.opcode, r.wr_id, r.byte_len),
        (WcStatus::Success, WcOpcode::Recv, 7, 5)
    );
    assert_eq!(r.imm_data, Some(0xdead));
    assert_eq!(b.mr.to_vec(100, 5), b"hello");
    let s = wait(&a.cq, &[&b.cq]);
    assert_eq!(
        (s.status, s.opcode, s.wr_id),
        (WcStatus::Success, WcOpcode::Send, 1)
    );
}

#[test]
fn large_send_is_segmented_and_inline_is_copied_at_post() {
    let (a, b) = rc_pair();
    let big_a = a.pd.alloc_mr(200_000, ALL).unwrap();
    let big_b = b.pd.alloc_mr(200_000, ALL).unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    big_a.write(0, &data);
    let rsge = [big_b.sge(0, 200_000)];
    // SAFETY: the MR outlives the test.
    unsafe {
        b.qp.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &rsge,
        }])
    }
    .unwrap();
    post(&a, SendWr::new(2, SendOp::Send, &[big_a.sge(0, 200_000)]));
    let r = wait(&b.cq, &[&a.cq]);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 200_000));
    assert_eq!(big_b.to_vec(0, 200_000), data);
    assert!(wait(&a.cq, &[&b.cq]).is_ok());

    // Inline: the source may change right after the post.
    post_recv(&b, 3, 0, 64);
    let buf = *b"inline!";
    let sge = [crate::Sge {
        addr: buf.as_ptr() as u64,
        length: 7,
        lkey: 0,
    }];
    post(
        &a,
        SendWr::new(4, SendOp::Send, &sge).flags(SendFlags::INLINE | SendFlags::SIGNALED),
    );
    assert!(wait(&b.cq, &[&a.cq]).is_ok());
    assert_eq!(b.mr.to_vec(0, 7), b"inline!");
}

#[test]
fn write_read_and_atomics_reach_remote_memory() {
    let (a, b) = rc_pair();
    let rb = b.mr.remote();
    a.mr.write(0, b"written");
    post(
        &a,
        SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote_addr: rb.addr + 8,
                rkey: rb.rkey,
            },
            &[a.mr.sge(0, 7)],
        ),
    );
    // b never polls: its helper must serve the write.
    let w = wait(&a.cq, &[]);
    assert_eq!(
        (w.status, w.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(b.mr.to_vec(8, 7), b"written");

    b.mr.write(1000, b"remote bytes");
    post(
        &a,
        SendWr::new(
            2,
            SendOp::RdmaRead {
                remote_addr: rb.addr + 1000,
                rkey: rb.rkey,
            },
            &[a.mr.sge(500, 12)],
        ),
    );
    let r = wait(&a.cq, &[]);
    assert_eq!(
        (r.status, r.opcode),
        (WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert_eq!(a.mr.to_vec(500, 12), b"remote bytes");

    b.mr.write(64, &40u64.to_ne_bytes());
    post(
        &a,
        SendWr::new(
            3,
            SendOp::FetchAdd {
                remote_addr: rb.addr + 64,
                rkey: rb.rkey,
                add: 2,
            },
            &[a.mr.sge(16, 8)],
        ),
    );
    assert!(wait(&a.cq, &[&b.cq]).is_ok());
    assert_eq!(a.mr.to_vec(16, 8), 40u64.to_ne_bytes());
    let cas = SendOp::CompareSwap {
        remote_addr: rb.addr + 64,
        rkey: rb.rkey,
        compare: 42,
        swap: 7,
    };
    post(&a, SendWr::new(4, cas, &[a.mr.sge(24, 8)]));
    assert!(wait(&a.cq, &[&b.cq]).is_ok());
    assert_eq!(a.mr.to_vec(24, 8), 42u64.to_ne_bytes());
    assert_eq!(b.mr.to_vec(64, 8), 7u64.to_ne_bytes());

    // Write with immediate consumes a receive and reports the length written.
    post_recv(&b, 9, 0, 0);
    let op = SendOp::RdmaWriteWithImm {
        remote_addr: rb.addr + 2000,
        rkey: rb.rkey,
        imm: 5,
    };
    post(&a, SendWr::new(5, op, &[a.mr.sge(0, 7)]));
    let r = wait(&b.cq, &[&a.cq]);
    assert_eq!(
        (r.status, r.opcode, r.byte_len, r.imm_data),
        (WcStatus::Success, WcOpcode::RecvRdmaWithImm, 7, Some(5))
    );
    assert_eq!(b.mr.to_vec(2000, 7), b"written");
}

#[test]
fn bad_rkey_is_remote_access_error_and_moves_both_to_err() {
    let (a, b) = rc_pair();
    let rb = b.mr.remote();
    post(
        &a,
        SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote_addr: rb.addr,
                rkey: rb.rkey ^ 0x100,
            },
            &[a.mr.sge(0, 8)],
        ),
    );
    post(&a, SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 8)]));
    let w = wait(&a.cq, &[&b.cq]);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemAccessErr));
    assert_eq!(wait(&a.cq, &[&b.cq]).status, WcStatus::WrFlushErr);
    assert_eq!(a.qp.state(), QpState::Err);
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.qp.state() != QpState::Err {
        let _ = b.cq.poll(&mut []);
        assert!(Instant::now() < deadline);
    }
}

#[test]
fn bad_lkey_is_local_protection_error() {
    let (a, b) = rc_pair();
    post_recv(&b, 1, 0, 64);
    let sge = [crate::Sge {
        addr: a.mr.addr(),
        length: 8,
        lkey: a.mr.lkey() ^ 0x100,
    }];
    post(&a, SendWr::new(1, SendOp::Send, &sge));
    let w = wait(&a.cq, &[&b.cq]);
    assert_eq!(w.status, WcStatus::LocProtErr);
    assert_eq!(a.qp.state(), QpState::Err);
}

#[test]
fn receive_too_small_fails_both_sides() {
    let (a, b) = rc_pair();
    post_recv(&b, 1, 0, 4);
    post(&a, SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 16)]));
    let r = wait(&b.cq, &[&a.cq]);
    assert_eq!((r.wr_id, r.status), (1, WcStatus::LocLenErr));
    let s = wait(&a.cq, &[&b.cq]);
    assert_eq!((s.wr_id, s.status), (2, WcStatus::RemInvReqErr));
}

#[test]
fn rnr_retries_until_a_receive_is_posted() {
    let (a, b) = rc_pair();
    post(&a, SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)]));
    // Let a few RNR NAKs go by, then post the receive.
    let until = Instant::now() + Duration::from_millis(20);
    while Instant::now() < until {
        let _ = a.cq.poll(&mut []);
        let _ = b.cq.poll(&mut []);
    }
    post_recv(&b, 2, 0, 64);
    assert!(wait(&b.cq, &[&a.cq]).is_ok());
    assert!(wait(&a.cq, &[&b.cq]).is_ok());
}

#[test]
fn rnr_retry_exhaustion_fails_the_send() {
    let (a, b) = (side(QpType::Rc), side(QpType::Rc));
    connect(&a, &b, 2, 1, 14);
    connect(&b, &a, 2, 1, 14);
    post(&a, SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)]));
    let w = wait(&a.cq, &[&b.cq]);
    assert_eq!(w.status, WcStatus::RnrRetryExcErr);
    assert_eq!(a.qp.state(), QpState::Err);
}

#[test]
fn modify_to_err_flushes_and_later_posts_flush() {
    let (a, _b) = rc_pair();
    post_recv(&a, 1, 0, 8);
    post_recv(&a, 2, 8, 8);
    a.qp.modify(QpState::Err, &QpAttr::default()).unwrap();
    assert_eq!((wait(&a.cq, &[]).wr_id, wait(&a.cq, &[]).wr_id), (1, 2));
    post(&a, SendWr::new(3, SendOp::Send, &[a.mr.sge(0, 8)]));
    let w = wait(&a.cq, &[]);
    assert_eq!((w.wr_id, w.status), (3, WcStatus::WrFlushErr));
}

#[test]
fn dead_peer_moves_qp_to_err_with_qp_fatal() {
    let (a, b) = rc_pair();
    post(&a, SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)]));
    drop(b);
    let w = wait(&a.cq, &[]);
    assert!(matches!(w.status, WcStatus::RetryExcErr), "{w:?}");
    assert_eq!(a.qp.state(), QpState::Err);
    assert_eq!(
        a.dev.try_async_event(),
        Some(AsyncEvent::QpFatal(a.qp.qp_num()))
    );
}

#[test]
fn sends_before_refused_and_cq_overrun_is_an_error() {
    let s = side(QpType::Rc);
    // SAFETY: an empty gather list names no memory.
    let err = unsafe { s.qp.post_send(&[SendWr::new(1, SendOp::Send, &[])]) }.unwrap_err();
    assert!(matches!(err, Error::Post { index: 0, .. }));

    let cq = s.dev.create_cq(1).unwrap();
    let qp =
        s.pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
    qp.modify(QpState::Init, &QpAttr::rc_init(ALL)).unwrap();
    let sge = [s.mr.sge(0, 8)];
    let wrs = [
        RecvWr {
            wr_id: 1,
            sg_list: &sge,
        },
        RecvWr {
            wr_id: 2,
            sg_list: &sge,
        },
    ];
    // SAFETY: the MR outlives the QP.
    unsafe { qp.post_recv(&wrs) }.unwrap();
    qp.modify(QpState::Err, &QpAttr::default()).unwrap();
    assert!(matches!(
        cq.poll(&mut [WorkCompletion::default(); 4]),
        Err(Error::CqOverrun)
    ));
    assert_eq!(s.dev.try_async_event(), Some(AsyncEvent::CqErr(cq.id())));
}

fn ud_pair(faults: UdFaults) -> (Side, Side) {
    let (a, b) = (side(QpType::Ud), side(QpType::Ud));
    a.dev.set_ud_faults(faults).unwrap();
    a.qp.activate_ud(0x1111, 0).unwrap();
    b.qp.activate_ud(0x1111, 0).unwrap();
    (a, b)
}

#[test]
fn ud_datagram_carries_grh_and_source() {
    let (a, b) = ud_pair(UdFaults::default());
    let ah =
        a.pd.create_ah(&AhAttr::from_endpoint(&b.qp.endpoint(0).unwrap(), 0))
            .unwrap();
    post_recv(&b, 1, 0, 1024);
    a.mr.write(0, b"datagram");
    let dest = UdDest {
        ah: &ah,
        remote_qpn: b.qp.qp_num(),
        remote_qkey: 0x1111,
    };
    post(
        &a,
        SendWr::new(2, SendOp::SendWithImm { imm: 3 }, &[a.mr.sge(0, 8)]).ud(dest),
    );
    assert!(wait(&a.cq, &[]).is_ok());
    let r = wait(&b.cq, &[]);
    assert_eq!(
        (r.status, r.byte_len, r.src_qp, r.grh, r.imm_data),
        (WcStatus::Success, 48, a.qp.qp_num(), true, Some(3))
    );
    assert_eq!(b.mr.to_vec(GRH_LEN, 8), b"datagram");
    assert_eq!(b.mr.to_vec(8, 16), a.dev.gid(1, 0).unwrap().0);

    // Wrong Q_Key: dropped and counted. Too large: LocLenErr.
    let bad = UdDest {
        remote_qkey: 0x2222,
        ..dest
    };
    post(&a, SendWr::new(3, SendOp::Send, &[a.mr.sge(0, 8)]).ud(bad));
    assert!(wait(&a.cq, &[]).is_ok());
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.dev.soft_stats().unwrap().ud_dropped_qkey == 0 {
        let _ = b.cq.poll(&mut []);
        assert!(Instant::now() < deadline);
    }
    let big = a.pd.alloc_mr(8192, ALL).unwrap();
    post(
        &a,
        SendWr::new(4, SendOp::Send, &[big.sge(0, 5000)]).ud(dest),
    );
    assert_eq!(wait(&a.cq, &[]).status, WcStatus::LocLenErr);
}

#[test]
fn ud_loss_is_deterministic_and_counted() {
    let (a, b) = ud_pair(UdFaults {
        loss: 1.0,
        ..UdFaults::default()
    });
    let ah =
        a.pd.create_ah(&AhAttr::from_endpoint(&b.qp.endpoint(0).unwrap(), 0))
            .unwrap();
    let dest = UdDest {
        ah: &ah,
        remote_qpn: b.qp.qp_num(),
        remote_qkey: 0x1111,
    };
    for i in 0..5 {
        post(&a, SendWr::new(i, SendOp::Send, &[a.mr.sge(0, 8)]).ud(dest));
        assert!(wait(&a.cq, &[]).is_ok());
    }
    let st = a.dev.soft_stats().unwrap();
    assert_eq!((st.ud_dropped_injected, st.ud_sent), (5, 0));
}

#[test]
fn srq_feeds_many_qps_in_epoll_mode_and_raises_its_limit() {
    use crate::SrqInitAttr;
    const N: usize = 8; // more than a CQ polls directly: exercises the epoll path
    let server = Device::open_soft(SoftConfig::default()).unwrap();
    let client = Device::open_soft(SoftConfig::default()).unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (
        server.create_cq(256).unwrap(),
        client.create_cq(256).unwrap(),
    );
    let srq = spd
        .create_srq(&SrqInitAttr {
            max_wr: 64,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let smr = spd.alloc_mr(64 * 64, ALL).unwrap();
    let recvs: Vec<_> = (0..64).map(|i| [smr.sge(i * 64, 64)]).collect();
    let wrs: Vec<_> = recvs
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr {
            wr_id: i as u64,
            sg_list: s,
        })
        .collect();
    // SAFETY: the MR outlives the SRQ's use of it.
    unsafe { srq.post_recv(&wrs) }.unwrap();
    srq.arm_limit(60).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..N {
        let mut init = QpInitAttr::new(QpType::Rc, &scq, &scq);
        init.srq = Some(&srq);
        let sqp = spd.create_qp(&init).unwrap();
        let cqp = cpd
            .create_qp(&QpInitAttr::new(QpType::Rc, &ccq, &ccq))
            .unwrap();
        let (se, ce) = (sqp.endpoint(0).unwrap(), cqp.endpoint(0).unwrap());
        sqp.connect_rc(&ce, 0, ALL).unwrap();
        cqp.connect_rc(&se, 0, ALL).unwrap();
        pairs.push((sqp, cqp));
    }
    for (i, (_, cqp)) in pairs.iter().enumerate() {
        for j in 0..4u64 {
            let wr = SendWr::new(
                i as u64 * 10 + j,
                SendOp::SendWithImm { imm: i as u32 },
                &[],
            );
            // SAFETY: an empty gather list names no memory.
            unsafe { cqp.post_send(&[wr]) }.unwrap();
        }
    }
    let mut per_qp = std::collections::HashMap::new();
    for _ in 0..N * 4 {
        let r = wait(&scq, &[&ccq]);
        assert!(r.is_ok(), "{r:?}");
        *per_qp.entry(r.qp_num).or_insert(0) += 1;
    }
    assert!(per_qp.values().all(|&n| n == 4) && per_qp.len() == N);
    for _ in 0..N * 4 {
        assert!(wait(&ccq, &[&scq]).is_ok());
    }
    assert_eq!(
        server.try_async_event(),
        Some(AsyncEvent::SrqLimitReached(srq.id()))
    );
    assert_eq!(server.try_async_event(), None);
}

#[test]
fn poll_async_wakes_on_a_completion_from_another_thread() {
    let (a, b) = rc_pair();
    post_recv(&b, 1, 0, 64);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sender = std::thread::spawn(move || {
        post(&a, SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 8)]));
        assert!(wait(&a.cq, &[]).is_ok());
    });
    let mut wc = [WorkCompletion::default(); 4];
    let n = rt
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(10), b.cq.poll_async(&mut wc)).await
        })
        .expect("woken within 10 s")
        .unwrap();
    assert_eq!((n, wc[0].wr_id, wc[0].status), (1, 1, WcStatus::Success));
    sender.join().unwrap();
}

#[test]
fn large_read_and_write_are_served_while_the_target_sleeps() {
    const LEN: usize = 4 << 20;
    let (a, b) = rc_pair();
    let la = a.pd.alloc_mr(LEN, ALL).unwrap();
    let lb = b.pd.alloc_mr(LEN, ALL).unwrap();
    let data: Vec<u8> = (0..LEN as u32).map(|i| (i % 253) as u8).collect();
    lb.write(0, &data);
    let rb = lb.remote();
    // b's application never polls: its helper serves both operations.
    let op = SendOp::RdmaRead {
        remote_addr: rb.addr,
        rkey: rb.rkey,
    };
    post(&a, SendWr::new(1, op, &[la.sge(0, LEN as u32)]));
    let r = wait(&a.cq, &[]);
    assert_eq!(
        (r.status, r.opcode),
        (WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert!(la.to_vec(0, LEN) == data);
    la.write(0, &[0xab; 4096]);
    let op = SendOp::RdmaWrite {
        remote_addr: rb.addr + 4096,
        rkey: rb.rkey,
    };
    post(&a, SendWr::new(2, op, &[la.sge(0, (LEN - 4096) as u32)]));
    assert!(wait(&a.cq, &[]).is_ok());
    assert_eq!(lb.to_vec(4096, 4096), vec![0xab; 4096]);
    assert!(lb.to_vec(8192, LEN - 8192) == data[4096..LEN - 4096]);
}

#[test]
fn an_idle_connection_does_not_spend_its_retry_budget() {
    let (a, b) = (side(QpType::Rc), side(QpType::Rc));
    // timeout 1: 8 us x 8 tries; idle time must not count against it.
    connect(&a, &b, 7, 1, 1);
    connect(&b, &a, 7, 1, 14);
    let until = Instant::now() + Duration::from_millis(5);
    while Instant::now() < until {
        let _ = a.cq.poll(&mut []);
        let _ = b.cq.poll(&mut []);
    }
    post_recv(&b, 1, 0, 64);
    post(&a, SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 8)]));
    // The ACK needs b's progress, which the helper may only give after ~1 ms, far
    // beyond this budget: poll b as well so the peer answers promptly.
    assert!(wait(&b.cq, &[&a.cq]).is_ok());
}
