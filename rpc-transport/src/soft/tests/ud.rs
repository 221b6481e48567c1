//! UD: GRH, source QPN, Q_Key, MTU, fault injection.

use std::time::{Duration, Instant};

use super::*;
use crate::{AhAttr, QpType, SendOp, SendWr, UdDest, UdFaults, WcStatus, GRH_LEN};

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

/// Sends datagrams with immediates `0..n` and returns the immediates in arrival order.
fn arrivals(faults: UdFaults, n: u32, expect: usize) -> Vec<u32> {
    let (a, b) = ud_pair(faults);
    let ah =
        a.pd.create_ah(&AhAttr::from_endpoint(&b.qp.endpoint(0).unwrap(), 0))
            .unwrap();
    for i in 0..expect as u64 {
        post_recv(&b, i, (i as usize % 16) * 128, 128);
    }
    let dest = UdDest {
        ah: &ah,
        remote_qpn: b.qp.qp_num(),
        remote_qkey: 0x1111,
    };
    for i in 0..n {
        post(
            &a,
            SendWr::new(u64::from(i), SendOp::SendWithImm { imm: i }, &[]).ud(dest),
        );
        assert!(wait(&a.cq, &[]).is_ok());
    }
    (0..expect)
        .map(|_| wait(&b.cq, &[]).imm_data.unwrap())
        .collect()
}

#[test]
fn ud_reorder_swaps_neighbours_and_duplicate_doubles() {
    let reorder = UdFaults {
        reorder: 1.0,
        ..UdFaults::default()
    };
    assert_eq!(arrivals(reorder, 4, 4), [1, 0, 3, 2]);
    let dup = UdFaults {
        duplicate: 1.0,
        ..UdFaults::default()
    };
    assert_eq!(arrivals(dup, 3, 6), [0, 0, 1, 1, 2, 2]);
}
