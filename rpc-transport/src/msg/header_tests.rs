//! The message layer without immediate data ([`ImmMode::Header`]): on a soft device
//! with the `iwarp_like` profile, which refuses every Send with Immediate, frames
//! still carry their 32-bit immediate, at the head of the payload.

use std::sync::Arc;

use super::tests::{connect, next, qp, side_with, Side};
use super::{ImmMode, RecvPool, RecvTarget, SendRing, UdDestination, UdSendRing, IMM_HEADER_LEN};
use crate::{
    AccessFlags, AhAttr, Error, PostError, QpCap, QpInitAttr, QpType, QueuePair, RecvWr,
    SoftProfile, WcOpcode, GRH_LEN,
};

const SLOT: usize = 1024;

/// An RC connection between two `iwarp_like` devices.
fn iwarp_pair() -> (Side, Side, Arc<QueuePair>, Arc<QueuePair>) {
    let (a, b) = (
        side_with(SoftProfile::IwarpLike),
        side_with(SoftProfile::IwarpLike),
    );
    assert!(!a.dev.caps().imm_data);
    let (qa, qb) = (qp(&a, None), qp(&b, None));
    connect(&qa, &qb);
    (a, b, qa, qb)
}

#[test]
fn header_mode_round_trips_immediates_and_payloads_without_immediate_data() {
    let (a, b, qa, qb) = iwarp_pair();
    let mode = ImmMode::for_caps(&a.dev.caps());
    assert_eq!(mode, ImmMode::Header);
    let pool = RecvPool::with_mode(&b.pd, RecvTarget::Qp(qb), 8, SLOT, None, mode).unwrap();
    let mut ring = SendRing::with_mode(&a.pd, qa, 8, SLOT, mode).unwrap();
    assert_eq!(ring.imm_mode(), ImmMode::Header);

    // Empty, inline-sized, large and full-capacity payloads, with immediates whose
    // four bytes all differ (a byte-order slip shows).
    let cap = SLOT - IMM_HEADER_LEN;
    for (i, len) in [0, 1, 40, 900, cap, 7].into_iter().enumerate() {
        let imm = 0x0102_0304u32.wrapping_mul(i as u32 + 1);
        let slot = loop {
            if let Some(s) = ring.acquire() {
                break s;
            }
            ring.handle_completion(&next(&a.cq, &b.cq));
        };
        ring.buf(&slot)[..len].fill(0xa0 + i as u8);
        ring.post(slot, len, imm).unwrap();

        let wc = next(&b.cq, &a.cq);
        assert_eq!(wc.opcode, WcOpcode::Recv);
        assert_eq!(wc.imm_data, None, "a plain Send carries no immediate");
        assert_eq!(
            wc.byte_len as usize,
            len + IMM_HEADER_LEN,
            "header on the wire"
        );
        let got = pool.complete(&wc).unwrap();
        assert_eq!(got.imm(), Some(imm));
        assert_eq!(got.len(), len);
        assert!(got.bytes().iter().all(|&x| x == 0xa0 + i as u8));
    }
}

#[test]
fn header_mode_slots_hold_four_bytes_less_and_say_so() {
    let (a, b, qa, qb) = iwarp_pair();
    let h = ImmMode::Header;
    let pool = RecvPool::with_mode(&b.pd, RecvTarget::Qp(qb.clone()), 4, SLOT, None, h).unwrap();
    let mut ring = SendRing::with_mode(&a.pd, qa.clone(), 4, SLOT, h).unwrap();
    assert_eq!(ring.slot_size(), SLOT - 4);
    assert_eq!(pool.slot_size(), SLOT - 4);
    let slot = ring.acquire().unwrap();
    assert_eq!(ring.buf(&slot).len(), SLOT - 4);
    ring.release(slot);
    // The immediate path keeps every byte.
    let full = SendRing::new(&a.pd, qa.clone(), 4, SLOT).unwrap();
    assert_eq!(full.slot_size(), SLOT);
    // A slot too small for the header is refused up front.
    assert!(matches!(
        SendRing::with_mode(&a.pd, qa, 4, 3, h),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        RecvPool::with_mode(&b.pd, RecvTarget::Qp(qb), 4, 3, None, h),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn the_header_is_the_immediate_in_network_order_at_the_head_of_the_frame() {
    let (a, b, qa, qb) = iwarp_pair();
    let mut ring = SendRing::with_mode(&a.pd, qa.clone(), 4, 64, ImmMode::Header).unwrap();
    // A raw receive buffer, so the bytes on the wire are seen as they are.
    let raw = b.pd.alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let sge = [raw.sge(0, 64)];
    // SAFETY: `raw` is read only after the receive completes, and outlives it.
    unsafe {
        qb.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &sge,
        }])
    }
    .unwrap();
    let slot = ring.acquire().unwrap();
    ring.buf(&slot)[..3].copy_from_slice(b"abc");
    ring.post(slot, 3, 0xdead_beef).unwrap();
    let wc = next(&b.cq, &a.cq);
    assert_eq!(wc.byte_len, 7);
    assert_eq!(raw.to_vec(0, 7), b"\xde\xad\xbe\xefabc");

    // And a frame too short to hold a header is a frame without an immediate.
    let pool =
        RecvPool::with_mode(&b.pd, RecvTarget::Qp(qb), 2, 64, None, ImmMode::Header).unwrap();
    let src = a.pd.alloc_mr(2, AccessFlags::empty()).unwrap();
    let sge = [src.sge(0, 2)];
    let wr = crate::SendWr::new(9, crate::SendOp::Send, &sge);
    // SAFETY: `src` outlives the send, which completes before the test ends.
    unsafe { qa.post_send(&[wr]) }.unwrap();
    let wc = next(&b.cq, &a.cq);
    assert_eq!(wc.byte_len, 2);
    let got = pool.complete(&wc).unwrap();
    assert_eq!(got.imm(), None);
    assert!(got.is_empty());
}

#[test]
fn the_immediate_path_is_refused_by_a_device_without_immediate_data() {
    let (a, _b, qa, _qb) = iwarp_pair();
    let mut ring = SendRing::new(&a.pd, qa, 4, 64).unwrap();
    let slot = ring.acquire().unwrap();
    match ring.post(slot, 8, 1) {
        Err(Error::Post { index: 0, reason }) => assert_eq!(reason, PostError::Unsupported),
        other => panic!("expected an Unsupported refusal, got {other:?}"),
    }
    assert_eq!(ring.free_slots(), 4, "the refused slot came back");
}

#[test]
fn header_mode_cork_writes_each_header_at_hold_time() {
    let (a, b, qa, qb) = iwarp_pair();
    let h = ImmMode::Header;
    let pool = RecvPool::with_mode(&b.pd, RecvTarget::Qp(qb), 16, 64, None, h).unwrap();
    let mut ring = SendRing::with_mode(&a.pd, qa, 16, 64, h).unwrap();
    ring.cork();
    for i in 0..10u32 {
        let slot = ring.acquire().unwrap();
        ring.buf(&slot)[0] = i as u8;
        ring.post(slot, 1, 1000 + i).unwrap();
    }
    ring.uncork().unwrap();
    for i in 0..10u32 {
        let got = pool.complete(&next(&b.cq, &a.cq)).unwrap();
        assert_eq!((got.imm(), got.bytes()), (Some(1000 + i), &[i as u8][..]));
    }
}

#[test]
fn immediate_mode_slots_give_the_completions_immediate() {
    let (a, b) = (side_with(SoftProfile::Full), side_with(SoftProfile::Full));
    let (qa, qb) = (qp(&a, None), qp(&b, None));
    connect(&qa, &qb);
    let pool = RecvPool::new(&b.pd, RecvTarget::Qp(qb), 4, 64, None).unwrap();
    let mut ring = SendRing::new(&a.pd, qa, 4, 64).unwrap();
    let slot = ring.acquire().unwrap();
    ring.buf(&slot)[..2].copy_from_slice(b"hi");
    ring.post(slot, 2, 0x55).unwrap();
    let wc = next(&b.cq, &a.cq);
    assert_eq!(wc.imm_data, Some(0x55));
    let got = pool.complete(&wc).unwrap();
    assert_eq!((got.imm(), got.bytes()), (Some(0x55), &b"hi"[..]));
}

#[test]
fn header_mode_on_ud_keeps_the_payload_after_the_grh_area() {
    // UD needs the full profile; the framing is the same on any device.
    let (a, b) = (side_with(SoftProfile::Full), side_with(SoftProfile::Full));
    let ud = |s: &Side, psn| {
        let mut init = QpInitAttr::new(QpType::Ud, &s.cq, &s.cq);
        init.cap = QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let q = Arc::new(s.pd.create_qp(&init).unwrap());
        q.activate_ud(0x77, psn).unwrap();
        q
    };
    let (qa, qb) = (ud(&a, 1), ud(&b, 2));
    let h = ImmMode::Header;
    let pool =
        RecvPool::with_mode(&b.pd, RecvTarget::Qp(qb.clone()), 4, GRH_LEN + 256, None, h).unwrap();
    assert_eq!(pool.slot_size(), GRH_LEN + 252);
    let mut ring = UdSendRing::with_mode(&a.pd, qa, 4, 256, h).unwrap();
    assert_eq!(ring.slot_size(), 252);
    let ep = qb.endpoint(2).unwrap();
    let ah =
        a.pd.create_ah(&AhAttr::from_endpoint(&ep, a.dev.preferred_gid_index()))
            .unwrap();
    let dest = UdDestination {
        ah: Arc::new(ah),
        qpn: ep.qpn,
        qkey: 0x77,
    };
    let slot = ring.acquire().unwrap();
    ring.buf(&slot)[..5].copy_from_slice(b"hello");
    ring.post(&slot, 5, 0x1234_5678, &dest).unwrap();
    // A retransmission while the first post is in flight (its completion is not
    // reaped): the same immediate goes, another would rewrite bytes being read.
    ring.post(&slot, 5, 0x1234_5678, &dest).unwrap();
    assert_eq!(ring.in_flight(), 2);
    assert!(matches!(
        ring.post(&slot, 5, 0x9999, &dest),
        Err(Error::InvalidArgument(_))
    ));
    for _ in 0..2 {
        let wc = loop {
            let wc = next(&b.cq, &a.cq);
            if wc.opcode == WcOpcode::Recv {
                break wc;
            }
        };
        assert_eq!(wc.byte_len as usize, GRH_LEN + 4 + 5);
        let got = pool.complete(&wc).unwrap();
        assert_eq!(got.imm(), Some(0x1234_5678));
        assert_eq!(got.len(), GRH_LEN + 5);
        assert_eq!(&got.bytes()[GRH_LEN..], b"hello");
    }
    ring.release(slot);
}
