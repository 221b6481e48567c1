//! RC data movement: Send, Write, Read, atomics, segmentation, inline, RNR.

use std::time::{Duration, Instant};

use super::*;
use crate::{QpState, QpType, RecvWr, SendFlags, SendOp, SendWr, WcOpcode, WcStatus};

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
    // timeout 1 (8 us x 8 tries, raised to the 50 ms floor): idle time must not count.
    connect(&a, &b, 7, 1, 1);
    connect(&b, &a, 7, 1, 14);
    let until = Instant::now() + Duration::from_millis(5);
    while Instant::now() < until {
        let _ = a.cq.poll(&mut []);
        let _ = b.cq.poll(&mut []);
    }
    post_recv(&b, 1, 0, 64);
    post(&a, SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 8)]));
    let r = wait(&b.cq, &[&a.cq]);
    assert!(r.is_ok(), "{r:?}");
    let s = wait(&a.cq, &[&b.cq]);
    assert!(s.is_ok(), "{s:?}");
}
