//! UD datagrams: the 40-byte GRH area at the head of every receive buffer, the
//! sender's QP number in the completion, the MTU limit, and drops with no receive.

use rpc_transport::{
    AddressHandle, Error, MemoryRegion, SendOp, SendWr, UdDest, WcOpcode, WcStatus, GRH_LEN,
};

use crate::common::wait::poll_now;
use crate::common::{
    has_ud_or_refuses_it, pattern, post_recv, post_send, wait_wc, UdPair, UdSide, QKEY,
};

/// Sends `len` bytes of `src` from `p.a` to `p.b` and waits for the local completion.
fn send(p: &UdPair, ah: &AddressHandle, src: &MemoryRegion, len: usize, op: SendOp, id: u64) {
    let sge = [src.sge(0, len as u32)];
    let dest = UdDest {
        ah,
        remote_qpn: p.b.qp.qp_num(),
        remote_qkey: QKEY,
    };
    // SAFETY: `src` is unchanged until the completion waited for below.
    unsafe { post_send(&p.a.qp, SendWr::new(id, op, &sge).ud(dest)) };
    let wc = wait_wc(&p.a.scq, "the datagram's send completion");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!((wc.wr_id, wc.opcode), (id, WcOpcode::Send));
}

#[test]
fn ud_receive_has_grh_area_and_sender_qpn() {
    if !has_ud_or_refuses_it() {
        return;
    }
    let p = UdPair::new();
    let ah = p.a.ah_to(&p.b.ep);
    let src = p.a.host.mr_all(256);
    let dst = p.b.host.mr_all(GRH_LEN + 256);
    let msg = pattern(200, 6);
    src.write(0, &msg);

    // SAFETY: `dst` is read only after completion.
    unsafe { post_recv(&p.b.qp, 3, &[dst.sge(0, (GRH_LEN + 256) as u32)]) };
    send(&p, &ah, &src, 200, SendOp::Send, 1);

    let wc = wait_wc(&p.b.rcq, "the datagram's receive");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!((wc.wr_id, wc.opcode), (3, WcOpcode::Recv));
    assert_eq!(
        wc.byte_len,
        (GRH_LEN + 200) as u32,
        "byte_len counts the GRH"
    );
    assert_eq!(wc.qp_num, p.b.qp.qp_num());
    assert_eq!(wc.src_qp, p.a.qp.qp_num());
    assert_eq!(wc.imm_data, None);
    assert_eq!(
        dst.to_vec(GRH_LEN, 200),
        msg,
        "payload starts after the 40-byte GRH area"
    );
}

#[test]
fn ud_send_with_imm_delivers_immediate_data() {
    if !has_ud_or_refuses_it() {
        return;
    }
    let p = UdPair::new();
    let ah = p.a.ah_to(&p.b.ep);
    let src = p.a.host.mr_all(64);
    let dst = p.b.host.mr_all(GRH_LEN + 64);
    src.write(0, b"ud imm");

    // SAFETY: `dst` is read only after completion.
    unsafe { post_recv(&p.b.qp, 1, &[dst.sge(0, (GRH_LEN + 64) as u32)]) };
    send(&p, &ah, &src, 6, SendOp::SendWithImm { imm: 0xabcd }, 2);

    let wc = wait_wc(&p.b.rcq, "the datagram's receive");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(wc.imm_data, Some(0xabcd));
    assert_eq!(wc.byte_len, (GRH_LEN + 6) as u32);
    assert_eq!(dst.to_vec(GRH_LEN, 6), b"ud imm");
}

#[test]
fn ud_payload_of_exactly_mtu_is_delivered() {
    if !has_ud_or_refuses_it() {
        return;
    }
    let p = UdPair::new();
    let mtu = p.a.host.mtu();
    let ah = p.a.ah_to(&p.b.ep);
    let src = p.a.host.mr_all(mtu);
    let dst = p.b.host.mr_all(GRH_LEN + mtu);
    let msg = pattern(mtu, 8);
    src.write(0, &msg);

    // SAFETY: `dst` is read only after completion.
    unsafe { post_recv(&p.b.qp, 1, &[dst.sge(0, (GRH_LEN + mtu) as u32)]) };
    send(&p, &ah, &src, mtu, SendOp::Send, 1);

    let wc = wait_wc(&p.b.rcq, "the MTU-sized datagram");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(wc.byte_len as usize, GRH_LEN + mtu);
    assert_eq!(dst.to_vec(GRH_LEN, mtu), msg);
}

#[test]
fn ud_payload_over_mtu_is_never_delivered() {
    if !has_ud_or_refuses_it() {
        return;
    }
    let p = UdPair::new();
    let mtu = p.a.host.mtu();
    let ah = p.a.ah_to(&p.b.ep);
    let src = p.a.host.mr_all(mtu + 1);
    let dst = p.b.host.mr_all(GRH_LEN + mtu + 1);
    src.write(0, &pattern(mtu + 1, 1));
    let room = (GRH_LEN + mtu + 1) as u32;
    // Receives big enough for the oversized datagram, so only the MTU can stop it.
    // SAFETY: `dst` is read only after completion.
    unsafe { post_recv(&p.b.qp, 1, &[dst.sge(0, room)]) };

    let sge = [src.sge(0, mtu as u32 + 1)];
    let dest = UdDest {
        ah: &ah,
        remote_qpn: p.b.qp.qp_num(),
        remote_qkey: QKEY,
    };
    let wr = SendWr::new(1, SendOp::Send, &sge).ud(dest);
    // What the sender sees varies: the IBA (C10-93.1.1) says emit nothing and raise no
    // error, so the send completes successfully (rxe); others refuse the post (EINVAL)
    // or complete it with LOC_LEN_ERR. What never varies: nothing is delivered.
    // SAFETY: `src` is unchanged until the send completes (or was never posted).
    match unsafe { p.a.qp.post_send(&[wr]) } {
        Err(Error::Post { index: 0, .. }) => {}
        Err(e) => panic!("unexpected error posting an over-MTU datagram: {e:?}"),
        Ok(()) => {
            let wc = wait_wc(&p.a.scq, "the over-MTU send's completion");
            assert!(
                matches!(wc.status, WcStatus::Success | WcStatus::LocLenErr),
                "over-MTU send completed with {wc:?}"
            );
        }
    }

    // A second, legal datagram takes the receive: the first never arrived. It comes
    // from a fresh QP, since on verbs a send error may leave the first one in SQE.
    let fresh = UdSide::new(0x33);
    let ah2 = fresh.ah_to(&p.b.ep);
    let src2 = fresh.host.mr_all(8);
    src2.write(0, b"legal");
    let sge2 = [src2.sge(0, 5)];
    let dest2 = UdDest {
        ah: &ah2,
        remote_qpn: p.b.qp.qp_num(),
        remote_qkey: QKEY,
    };
    // SAFETY: `src2` is unchanged until completion.
    unsafe { post_send(&fresh.qp, SendWr::new(2, SendOp::Send, &sge2).ud(dest2)) };
    assert!(wait_wc(&fresh.scq, "the legal datagram's send").is_ok());
    let wc = wait_wc(&p.b.rcq, "the legal datagram");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(
        wc.byte_len,
        (GRH_LEN + 5) as u32,
        "the over-MTU datagram was delivered"
    );
    assert_eq!(wc.src_qp, fresh.qp.qp_num());
    assert_eq!(dst.to_vec(GRH_LEN, 5), b"legal");
}

#[test]
fn ud_datagram_without_receive_is_dropped() {
    if !has_ud_or_refuses_it() {
        return;
    }
    let p = UdPair::new();
    let ah = p.a.ah_to(&p.b.ep);
    let src = p.a.host.mr_all(64);
    let dst = p.b.host.mr_all(GRH_LEN + 64);

    // The first datagram finds no receive posted: its send still completes (UD has no
    // acknowledgement) and it must be gone, not held for a later receive.
    src.write(0, b"first");
    send(&p, &ah, &src, 5, SendOp::Send, 1);
    assert!(poll_now(&p.b.rcq).is_empty());

    // SAFETY: `dst` is read only after completion.
    unsafe { post_recv(&p.b.qp, 7, &[dst.sge(0, (GRH_LEN + 64) as u32)]) };
    src.write(0, b"second");
    send(&p, &ah, &src, 6, SendOp::Send, 2);

    let wc = wait_wc(&p.b.rcq, "the second datagram");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(
        dst.to_vec(GRH_LEN, 6),
        b"second",
        "the receive got the datagram sent before it was posted"
    );
    assert_eq!(wc.byte_len, (GRH_LEN + 6) as u32);
    assert!(poll_now(&p.b.rcq).is_empty());
}
