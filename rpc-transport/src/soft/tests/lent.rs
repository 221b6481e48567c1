//! Sends and RDMA Writes beyond a ring chunk, lent by the requester and taken by the
//! responder with one copy (`SEND_LENT`, `WRITE_LENT`): bytes arrive intact, the
//! responder's checks still decide every access, and a responder that may not take
//! them has the message sent again with its bytes.

use std::sync::{Arc, Weak};

use super::super::rc::CHUNK;
use super::shm::soft;
use super::*;
use crate::device::DeviceImp;
use crate::mr_buffer::MrBuffer;
use crate::{RemoteMr, SendOp, WcOpcode, WcStatus};

/// Bytes lent by `a` and not yet let go (held until their message is acknowledged).
fn lent_held(a: &Side) -> usize {
    soft(a).lock().rc.as_ref().unwrap().st.lending.len()
}

/// Posts `wr` at `a`, and polls both sides until `b` answered a message RNR.
fn post_until_rnr(a: &Side, b: &Side, wr: SendWr<'_>) {
    let naks = stats(b).rc_rnr_naks;
    post(a, wr);
    poll_until(
        &[&a.cq, &b.cq],
        || stats(b).rc_rnr_naks != naks,
        || "no RNR NAK within 10 s".into(),
    );
}

/// A Send of a little over 1 MiB from `a`, lent and answered RNR by `b` (which has
/// no receive), so that `a` holds the loan; the region it is lent from.
fn lent_and_refused(a: &Side, b: &Side) -> MemoryRegion {
    const LEN: usize = (1 << 20) + 3;
    let from = a.pd.alloc_mr(LEN, ALL).unwrap();
    from.write(0, &pattern(LEN, 9));
    post_until_rnr(
        a,
        b,
        SendWr::new(5, SendOp::Send, &[from.sge(0, LEN as u32)]),
    );
    from
}

/// The buffers `a` holds lent now (at least one), watched without keeping them.
fn lent_buffers(a: &Side) -> Vec<Weak<MrBuffer>> {
    let q = soft(a).lock();
    let st = &q.rc.as_ref().unwrap().st;
    let lent: Vec<_> = st.lending.buffers().map(Arc::downgrade).collect();
    assert!(!lent.is_empty(), "nothing lent");
    lent
}

fn still_held(alive: usize) -> String {
    format!("{alive} lent buffers still held 10 s after the peer could close")
}

fn write_imm(to: RemoteMr, off: u64, imm: u32) -> SendOp {
    SendOp::RdmaWriteWithImm {
        remote_addr: to.addr + off,
        rkey: to.rkey,
        imm,
    }
}

/// A Send of several MiB (not a multiple of a segment, from and to odd offsets) is
/// taken from the requester byte for byte, with its immediate; the responder's
/// statistics say so, the requester lets go of what it lent once the Send is
/// acknowledged, and small traffic goes on behind it.
#[test]
fn a_send_of_several_mib_is_taken_byte_for_byte() {
    const LEN: usize = (3 << 20) + 12_345;
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let from = a.pd.alloc_mr(LEN + 5, ALL).unwrap();
    let into = b.pd.alloc_mr(LEN + 64, ALL).unwrap();
    let data = pattern(LEN, 3);
    from.write(5, &data);
    into.write(0, &[0xee; 64]);
    post_recv_into(&b, &into, 4, 3, LEN as u32 + 10);
    let op = SendOp::SendWithImm { imm: 0x5eed };
    post(&a, SendWr::new(8, op, &[from.sge(5, LEN as u32)]));
    let wc = wait(&b.cq, &[&a.cq]);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.imm_data),
        (
            4,
            WcStatus::Success,
            WcOpcode::Recv,
            LEN as u32,
            Some(0x5eed)
        )
    );
    let sent = wait(&a.cq, &[&b.cq]);
    assert_eq!((sent.wr_id, sent.status), (8, WcStatus::Success));
    assert!(into.to_vec(3, LEN) == data, "the taken bytes differ");
    assert_eq!(
        into.to_vec(0, 3),
        [0xee; 3],
        "bytes before the receive moved"
    );
    assert_eq!(stats(&b).rc_lent_bytes_taken, LEN as u64);
    assert_eq!(stats(&b).rc_loans_refused, 0);
    assert_eq!(lent_held(&a), 0, "the requester still holds what it lent");
    small_send_flows(&a, &b);
}

/// RDMA Writes of several MiB, with and without immediate, land byte for byte where
/// they were aimed and nowhere else, one right after the other.
#[test]
fn writes_of_several_mib_are_taken_byte_for_byte() {
    const LEN: usize = (2 << 20) + 777;
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let from = a.pd.alloc_mr(2 * LEN, ALL).unwrap();
    let target = b.pd.alloc_mr(2 * LEN + 16, ALL).unwrap();
    let (one, two) = (pattern(LEN, 1), pattern(LEN, 2));
    from.write(0, &one);
    from.write(LEN, &two);
    target.write(0, &vec![0xee; 2 * LEN + 16]);
    let to = target.remote();
    let plain = SendOp::RdmaWrite {
        remote_addr: to.addr + 8,
        rkey: to.rkey,
    };
    post(&a, SendWr::new(1, plain, &[from.sge(0, LEN as u32)]));
    post_recv(&b, 6, 0, 0);
    let with_imm = write_imm(to, 8 + LEN as u64, 99);
    post(&a, SendWr::new(2, with_imm, &[from.sge(LEN, LEN as u32)]));
    let wc = wait(&b.cq, &[&a.cq]);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.imm_data),
        (6, WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(99))
    );
    for want in [1, 2] {
        let wc = wait(&a.cq, &[&b.cq]);
        assert_eq!((wc.wr_id, wc.status), (want, WcStatus::Success));
    }
    assert!(target.to_vec(8, LEN) == one, "the first Write differs");
    assert!(
        target.to_vec(8 + LEN, LEN) == two,
        "the second Write differs"
    );
    assert_eq!(target.to_vec(0, 8), [0xee; 8]);
    assert_eq!(target.to_vec(8 + 2 * LEN, 8), [0xee; 8]);
    assert_eq!(stats(&b).rc_lent_bytes_taken, 2 * LEN as u64);
    assert_eq!(lent_held(&a), 0);
}

/// A lent Write the responder must refuse (beyond its region, a stale rkey, a region
/// without remote write) fails REM_ACCESS_ERR as on the ring, and not one byte is
/// taken or lands.
#[test]
fn a_refused_write_fails_remote_access_and_takes_nothing() {
    const LEN: usize = 1 << 20;
    for case in ["beyond bounds", "stale rkey", "no remote write"] {
        let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
        let rights = if case == "no remote write" {
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ
        } else {
            ALL
        };
        let target = b.pd.alloc_mr(LEN, rights).unwrap();
        target.write(0, &vec![0xee; LEN]);
        let stale = b.pd.alloc_mr(LEN, ALL).unwrap();
        // One segment whose last byte is one past the region (a Write is checked
        // segment by segment, on the ring as here).
        let (to, at) = match case {
            "stale rkey" => {
                let r = stale.remote();
                drop(stale);
                (r, 0)
            }
            "beyond bounds" => (target.remote(), 1),
            _ => (target.remote(), 0),
        };
        let from = a.pd.alloc_mr(LEN, ALL).unwrap();
        from.write(0, &pattern(LEN, 4));
        let op = SendOp::RdmaWrite {
            remote_addr: to.addr + at,
            rkey: to.rkey,
        };
        post(&a, SendWr::new(7, op, &[from.sge(0, LEN as u32)]));
        let wc = wait(&a.cq, &[&b.cq]);
        assert_eq!(wc.status, WcStatus::RemAccessErr, "{case}: {wc:?}");
        assert!(
            target.to_vec(0, LEN).iter().all(|&x| x == 0xee),
            "{case}: bytes landed"
        );
        assert_eq!(stats(&b).rc_lent_bytes_taken, 0, "{case}");
        assert_eq!(
            lent_held(&a),
            0,
            "{case}: the requester still holds its loan"
        );
    }
}

/// A receive too small for a lent Send fails LOC_LEN_ERR at the responder and
/// REM_INV_REQ_ERR at the requester, with no byte taken.
#[test]
fn a_lent_send_into_a_small_receive_fails_and_takes_nothing() {
    const LEN: usize = 1 << 20;
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let from = a.pd.alloc_mr(LEN, ALL).unwrap();
    let into = b.pd.alloc_mr(LEN, ALL).unwrap();
    into.write(0, &vec![0xee; LEN]);
    post_recv_into(&b, &into, 3, 0, LEN as u32 - 1);
    post(&a, SendWr::new(9, SendOp::Send, &[from.sge(0, LEN as u32)]));
    let wc = wait(&b.cq, &[&a.cq]);
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::LocLenErr));
    let wc = wait(&a.cq, &[&b.cq]);
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::RemInvReqErr));
    assert!(into.to_vec(0, LEN).iter().all(|&x| x == 0xee));
    assert_eq!(stats(&b).rc_lent_bytes_taken, 0);
}

/// A lent Send that finds no receive is answered RNR and taken once one is posted.
#[test]
fn a_lent_send_waits_out_rnr_and_is_then_taken() {
    const LEN: usize = (1 << 20) + 3;
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let from = a.pd.alloc_mr(LEN, ALL).unwrap();
    let into = b.pd.alloc_mr(LEN, ALL).unwrap();
    let data = pattern(LEN, 8);
    from.write(0, &data);
    post_until_rnr(
        &a,
        &b,
        SendWr::new(5, SendOp::Send, &[from.sge(0, LEN as u32)]),
    );
    post_recv_into(&b, &into, 1, 0, LEN as u32);
    let wc = wait(&b.cq, &[&a.cq]);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, LEN as u32));
    assert!(into.to_vec(0, LEN) == data);
    assert_eq!(wait(&a.cq, &[&b.cq]).status, WcStatus::Success);
}

/// With direct copies off on the responder's device, or on both, large Sends and
/// Writes still arrive byte for byte. A requester that lends to a responder that may
/// not take is answered "send the bytes" once, sends that message again through the
/// ring and lends nothing more on the connection.
#[test]
fn without_the_right_to_take_the_bytes_come_through_the_ring() {
    const LEN: usize = (2 << 20) + 99;
    for (la, lb) in [
        (SoftLink::Auto, SoftLink::Rings),
        (SoftLink::Rings, SoftLink::Rings),
    ] {
        let (a, b) = pair_on_rings(la, lb);
        let from = a.pd.alloc_mr(2 * LEN, ALL).unwrap();
        let into = b.pd.alloc_mr(2 * LEN, ALL).unwrap();
        let (one, two) = (pattern(LEN, 5), pattern(LEN, 6));
        from.write(0, &one);
        from.write(LEN, &two);
        post_recv_into(&b, &into, 1, 0, LEN as u32);
        post(&a, SendWr::new(1, SendOp::Send, &[from.sge(0, LEN as u32)]));
        let to = into.remote();
        let write = SendOp::RdmaWrite {
            remote_addr: to.addr + LEN as u64,
            rkey: to.rkey,
        };
        post(&a, SendWr::new(2, write, &[from.sge(LEN, LEN as u32)]));
        let wc = wait(&b.cq, &[&a.cq]);
        assert_eq!(wc.status, WcStatus::Success, "{la:?}/{lb:?}: {wc:?}");
        for want in [1, 2] {
            let wc = wait(&a.cq, &[&b.cq]);
            assert_eq!((wc.wr_id, wc.status), (want, WcStatus::Success));
        }
        assert!(
            into.to_vec(0, LEN) == one,
            "{la:?}/{lb:?}: the Send differs"
        );
        assert!(
            into.to_vec(LEN, LEN) == two,
            "{la:?}/{lb:?}: the Write differs"
        );
        let sb = stats(&b);
        assert_eq!(sb.rc_lent_bytes_taken, 0, "{la:?}/{lb:?}");
        let want = u64::from(la == SoftLink::Auto);
        assert_eq!(
            sb.rc_loans_refused, want,
            "{la:?}/{lb:?}: one refusal, then none"
        );
        assert_eq!(lent_held(&a), 0, "{la:?}/{lb:?}");
        assert_eq!(stats(&a).rc_frames_malformed + sb.rc_frames_malformed, 0);
    }
}

/// A Send gathered from several SGEs lends what lies beyond a ring chunk in each SGE
/// longer than one: a short SGE goes through the ring with the first bytes of the
/// SGE after it, and the rest of that SGE is lent. Every byte lands in order.
#[test]
fn a_send_of_several_sges_lends_the_rest_of_each_large_one() {
    const PART: usize = 96 * 1024;
    const HEAD: usize = 16;
    const TAIL: usize = 5;
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let from = a.pd.alloc_mr(3 * PART + 64, ALL).unwrap();
    let total = HEAD + PART + TAIL + PART;
    let into = b.pd.alloc_mr(total, ALL).unwrap();
    let data = pattern(3 * PART + 64, 7);
    from.write(0, &data);
    post_recv_into(&b, &into, 1, 0, total as u32);
    // Out of order in `from`, so that a gather in place would be wrong.
    let (head, one, tail, two) = (3 * PART + 8, 2 * PART, 3 * PART + 40, 0);
    let sges = [
        from.sge(head, HEAD as u32),
        from.sge(one, PART as u32),
        from.sge(tail, TAIL as u32),
        from.sge(two, PART as u32),
    ];
    post(&a, SendWr::new(1, SendOp::Send, &sges));
    let wc = wait(&b.cq, &[&a.cq]);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, total as u32));
    assert_eq!(wait(&a.cq, &[&b.cq]).status, WcStatus::Success);
    let mut want = Vec::new();
    for (at, len) in [(head, HEAD), (one, PART), (tail, TAIL), (two, PART)] {
        want.extend_from_slice(&data[at..at + len]);
    }
    assert!(into.to_vec(0, total) == want, "the gathered bytes differ");
    // Each large SGE's first bytes rode the ring behind the short one before it: at
    // most a chunk with it (less when the ring had less room), the rest was lent.
    let at_least = (PART - (CHUNK - HEAD)) + (PART - (CHUNK - TAIL));
    let taken = stats(&b).rc_lent_bytes_taken as usize;
    assert!(
        (at_least..=2 * PART).contains(&taken),
        "{taken} bytes lent, not between {at_least} and {}",
        2 * PART
    );
    assert_eq!(lent_held(&a), 0, "the requester still holds what it lent");
    small_send_flows(&a, &b);
}

/// An RDMA Write of two large SGEs lends both: no ring chunk is needed before the
/// first, and the second starts where the first ends.
#[test]
fn a_write_of_several_large_sges_is_lent_whole() {
    const PART: usize = (1 << 20) + 333;
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let from = a.pd.alloc_mr(2 * PART + 16, ALL).unwrap();
    let target = b.pd.alloc_mr(2 * PART + 16, ALL).unwrap();
    let data = pattern(2 * PART + 16, 9);
    from.write(0, &data);
    target.write(0, &vec![0xee; 2 * PART + 16]);
    let to = target.remote();
    let sges = [from.sge(PART + 16, PART as u32), from.sge(0, PART as u32)];
    post(&a, SendWr::new(3, write_imm(to, 8, 5), &sges));
    post_recv(&b, 2, 0, 0);
    let wc = wait(&b.cq, &[&a.cq]);
    assert_eq!(
        (wc.wr_id, wc.status, wc.imm_data),
        (2, WcStatus::Success, Some(5))
    );
    assert_eq!(wait(&a.cq, &[&b.cq]).status, WcStatus::Success);
    assert!(
        target.to_vec(8, PART) == data[PART + 16..],
        "the first SGE differs"
    );
    assert!(
        target.to_vec(8 + PART, PART) == data[..PART],
        "the second SGE differs"
    );
    assert_eq!(target.to_vec(0, 8), [0xee; 8]);
    assert_eq!(target.to_vec(8 + 2 * PART, 8), [0xee; 8]);
    assert_eq!(stats(&b).rc_lent_bytes_taken, 2 * PART as u64);
    assert_eq!(lent_held(&a), 0);
}

/// A QP destroyed while its peer may still take the bytes it lent keeps them, even
/// with their region deregistered, until that peer closes its end of the connection
/// (it does once the destroyed side's end closes), and then lets them go.
#[test]
fn a_destroyed_qps_loan_is_kept_until_its_peer_closes() {
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let from = lent_and_refused(&a, &b);
    // A buffer per lent segment (1 MiB each), per attempt until it is taken.
    assert!(lent_held(&a) >= 2, "{} buffers lent", lent_held(&a));
    let Side {
        dev: a_dev,
        qp: a_qp,
        cq: a_cq,
        ..
    } = a;
    let held = || a_dev.soft_stats().unwrap().held_for_peers;
    {
        // `b` can neither take nor close while this is held: its connection goes
        // only under its QP's lock.
        let b_qp = soft(&b).lock();
        drop(a_qp);
        drop(from);
        // The QP is gone once nothing else (`a`'s helper, briefly) holds it.
        poll_until(
            &[],
            || held() != 0,
            || "the destroyed QP's loan is not held for its live peer".into(),
        );
        assert!(held() >= 2);
        drop(b_qp);
    }
    // `b` reads the end of the connection, fails, and closes its end.
    poll_until(
        &[&b.cq, &a_cq],
        || held() == 0,
        || "the loan was still held 10 s after its peer could close".into(),
    );
    assert_eq!(b.qp.state(), QpState::Err, "the peer did not end its QP");
}

/// A soft device dropped while it holds a destroyed QP's loan keeps the loan, as the
/// device did, until the peer closes its end of the connection, and then lets it go:
/// not at its own drop (the peer may still be taking the bytes), and not never.
#[test]
fn a_dropped_devices_held_loan_goes_when_its_peer_closes() {
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let from = lent_and_refused(&a, &b);
    let lent = lent_buffers(&a);
    let alive = || lent.iter().filter(|w| w.strong_count() > 0).count();
    let a_dev = match &a.dev.imp {
        DeviceImp::Soft(d) => Arc::downgrade(d),
        #[allow(unreachable_patterns)]
        _ => panic!("not a soft device"),
    };
    {
        // `b` can neither take nor close while this is held.
        let b_qp = soft(&b).lock();
        drop(a);
        drop(from);
        poll_until(
            &[],
            || a_dev.strong_count() == 0,
            || "the device was not dropped".into(),
        );
        assert_eq!(
            alive(),
            lent.len(),
            "the loan was let go while its peer could still take it"
        );
        drop(b_qp);
    }
    // `b` reads the end of the connection, fails, and closes its end.
    poll_until(&[&b.cq], || alive() == 0, || still_held(alive()));
    assert_eq!(b.qp.state(), QpState::Err, "the peer did not end its QP");
}

/// A QP moved to RESET while its peer may still take the bytes it lent keeps them
/// for that peer, as a destroyed one does, and lets them go once the peer closes.
#[test]
fn a_reset_qps_loan_is_kept_until_its_peer_closes() {
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let from = lent_and_refused(&a, &b);
    let lent = lent_buffers(&a);
    let alive = || lent.iter().filter(|w| w.strong_count() > 0).count();
    {
        // `b` can neither take nor close while this is held.
        let b_qp = soft(&b).lock();
        a.qp.modify(QpState::Reset, &QpAttr::default()).unwrap();
        drop(from);
        assert_eq!(a.qp.state(), QpState::Reset);
        assert_eq!(
            alive(),
            lent.len(),
            "the loan was let go while its peer could still take it"
        );
        assert!(a.dev.soft_stats().unwrap().held_for_peers >= 1);
        drop(b_qp);
    }
    poll_until(&[&b.cq, &a.cq], || alive() == 0, || still_held(alive()));
    assert_eq!(a.dev.soft_stats().unwrap().held_for_peers, 0);
    assert_eq!(b.qp.state(), QpState::Err, "the peer did not end its QP");
}
