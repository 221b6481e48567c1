//! RC Send and Receive: payload, immediate data, gather/scatter, order, post lists,
//! signaling, inline data, and a receive too small.

use rpc_transport::{PostError, QpCap, RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus};

use crate::common::quirks::{assert_status, RXE_RECV_TOO_SMALL, RXE_RECV_TOO_SMALL_NAK};
use crate::common::wait::poll_now;
use crate::common::{
    assert_refused, has_imm_or_refuses, pattern, post_recv, post_send, wait_wc, wait_wcs, RcOpts,
    RcPair,
};

#[test]
fn send_delivers_payload_and_completes_both_sides() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(4096);
    let dst = p.b.host.mr_all(4096);
    let msg = pattern(1000, 1);
    src.write(0, &msg);

    // SAFETY: `dst` outlives the test and is only read after the receive completes.
    unsafe { post_recv(&p.b.qp, 77, &[dst.sge(0, 4096)]) };
    let sge = [src.sge(0, msg.len() as u32)];
    // SAFETY: `src` is not written again and outlives the send's completion.
    unsafe { post_send(&p.a.qp, SendWr::new(11, SendOp::Send, &sge)) };

    let rwc = wait_wc(&p.b.rcq, "receive completion");
    assert_eq!(rwc.status, WcStatus::Success, "{rwc:?}");
    assert_eq!(rwc.wr_id, 77);
    assert_eq!(rwc.opcode, WcOpcode::Recv);
    assert_eq!(rwc.byte_len, msg.len() as u32);
    assert_eq!(rwc.imm_data, None, "a plain Send carries no immediate");
    assert_eq!(rwc.qp_num, p.b.qp.qp_num());
    assert_eq!(dst.to_vec(0, msg.len()), msg);
    assert!(
        dst.to_vec(msg.len(), 16).iter().all(|&b| b == 0),
        "bytes past the message were written"
    );

    let swc = wait_wc(&p.a.scq, "send completion");
    assert_eq!(swc.status, WcStatus::Success, "{swc:?}");
    assert_eq!(swc.wr_id, 11);
    assert_eq!(swc.opcode, WcOpcode::Send);
    assert_eq!(swc.qp_num, p.a.qp.qp_num());
}

#[test]
fn send_with_imm_delivers_immediate_data() {
    let p = RcPair::new();
    if !has_imm_or_refuses(&p, SendOp::SendWithImm { imm: 1 }) {
        return;
    }
    let src = p.a.host.mr_all(64);
    let dst = p.b.host.mr_all(64);
    src.write(0, b"imm!");

    // SAFETY: `dst` outlives the test and is read only after completion.
    unsafe { post_recv(&p.b.qp, 1, &[dst.sge(0, 64)]) };
    let sge = [src.sge(0, 4)];
    let op = SendOp::SendWithImm { imm: 0xdead_beef };
    // SAFETY: `src` is unchanged until the send completes.
    unsafe { post_send(&p.a.qp, SendWr::new(2, op, &sge)) };

    let rwc = wait_wc(&p.b.rcq, "receive completion");
    assert_eq!(rwc.status, WcStatus::Success, "{rwc:?}");
    assert_eq!(rwc.opcode, WcOpcode::Recv);
    assert_eq!(rwc.imm_data, Some(0xdead_beef));
    assert_eq!(rwc.byte_len, 4, "the immediate is not counted in byte_len");
    assert_eq!(dst.to_vec(0, 4), b"imm!");
    assert!(wait_wc(&p.a.scq, "send completion").is_ok());
}

#[test]
fn send_gathers_every_sge_in_order() {
    let p = RcPair::new();
    let one = p.a.host.mr_all(256);
    let two = p.a.host.mr_all(256);
    let dst = p.b.host.mr_all(1024);
    let (x, y, z) = (pattern(100, 1), pattern(37, 2), pattern(200, 3));
    one.write(10, &x);
    two.write(0, &y);
    one.write(50 + 100, &z[..56]);
    two.write(100, &z[56..]);
    // Three SGEs from two regions, in an order unlike their addresses.
    let sges = [
        one.sge(10, 100),
        two.sge(0, 37),
        one.sge(150, 56),
        two.sge(100, 144),
    ];

    // SAFETY: `dst` is read only after completion.
    unsafe { post_recv(&p.b.qp, 1, &[dst.sge(0, 1024)]) };
    // SAFETY: the gathered ranges are not written until the send completes.
    unsafe { post_send(&p.a.qp, SendWr::new(1, SendOp::Send, &sges)) };

    let rwc = wait_wc(&p.b.rcq, "receive completion");
    assert_eq!(rwc.status, WcStatus::Success, "{rwc:?}");
    assert_eq!(rwc.byte_len, 337);
    let expect: Vec<u8> = [x, y, z].concat();
    assert_eq!(dst.to_vec(0, 337), expect);
    assert!(wait_wc(&p.a.scq, "send completion").is_ok());
}

#[test]
fn recv_scatters_across_sges_in_order() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(512);
    let d1 = p.b.host.mr_all(64);
    let d2 = p.b.host.mr_all(512);
    let msg = pattern(250, 9);
    src.write(0, &msg);

    // Three SGEs over two regions, in an order unlike their addresses, exactly as
    // long as the message.
    let sges = [d1.sge(8, 50), d2.sge(100, 100), d2.sge(0, 100)];
    // SAFETY: `d1` and `d2` are read only after the receive completes.
    unsafe { post_recv(&p.b.qp, 5, &sges) };
    let sge = [src.sge(0, 250)];
    // SAFETY: `src` is unchanged until completion.
    unsafe { post_send(&p.a.qp, SendWr::new(1, SendOp::Send, &sge)) };

    let rwc = wait_wc(&p.b.rcq, "receive completion");
    assert_eq!(rwc.status, WcStatus::Success, "{rwc:?}");
    assert_eq!(rwc.byte_len, 250);
    assert_eq!(d1.to_vec(8, 50), msg[..50]);
    assert_eq!(d2.to_vec(100, 100), msg[50..150]);
    assert_eq!(d2.to_vec(0, 100), msg[150..250]);
    assert!(
        d1.to_vec(0, 8).iter().all(|&b| b == 0),
        "wrote before the SGE"
    );
    assert!(wait_wc(&p.a.scq, "send completion").is_ok());
}

#[test]
fn rc_delivers_every_message_once_in_order() {
    const N: usize = 100;
    const LEN: usize = 512;
    let p = RcPair::new();
    let src = p.a.host.mr_all(N * LEN);
    let dst = p.b.host.mr_all(N * LEN);
    for i in 0..N {
        // SAFETY: each slot of `dst` is read only after its completion.
        unsafe { post_recv(&p.b.qp, i as u64, &[dst.sge(i * LEN, LEN as u32)]) };
    }
    for i in 0..N {
        src.write(i * LEN, &pattern(LEN, i as u8));
        let sge = [src.sge(i * LEN, LEN as u32)];
        // One post per WR: order must hold across doorbells, not only inside a list.
        // SAFETY: slot `i` of `src` is not written again.
        unsafe { post_send(&p.a.qp, SendWr::new(i as u64, SendOp::Send, &sge)) };
    }
    let rwcs = wait_wcs(&p.b.rcq, N, "receive completions");
    for (i, wc) in rwcs.iter().enumerate() {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(wc.wr_id, i as u64, "receives completed out of order");
        // Message i landed in receive i: the sends were consumed in order too.
        assert_eq!(dst.to_vec(i * LEN, LEN), pattern(LEN, i as u8), "slot {i}");
    }
    let swcs = wait_wcs(&p.a.scq, N, "send completions");
    let ids: Vec<u64> = swcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..N as u64).collect::<Vec<_>>());
    assert!(swcs.iter().all(|w| w.is_ok()), "{swcs:?}");
}

#[test]
fn wr_lists_post_every_wr_in_one_call() {
    const N: usize = 16;
    let p = RcPair::new();
    let src = p.a.host.mr_all(N * 64);
    let dst = p.b.host.mr_all(N * 64);
    for i in 0..N {
        src.write(i * 64, &pattern(64, i as u8));
    }
    let rsges: Vec<[Sge; 1]> = (0..N).map(|i| [dst.sge(i * 64, 64)]).collect();
    let rwrs: Vec<RecvWr> = rsges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr {
            wr_id: 100 + i as u64,
            sg_list: s,
        })
        .collect();
    // SAFETY: `dst` is read only after the receives complete.
    unsafe { p.b.qp.post_recv(&rwrs) }.expect("post_recv list");
    let ssges: Vec<[Sge; 1]> = (0..N).map(|i| [src.sge(i * 64, 64)]).collect();
    let swrs: Vec<SendWr> = ssges
        .iter()
        .enumerate()
        .map(|(i, s)| SendWr::new(200 + i as u64, SendOp::Send, s))
        .collect();
    // SAFETY: `src` is unchanged until the sends complete.
    unsafe { p.a.qp.post_send(&swrs) }.expect("post_send list");

    let rwcs = wait_wcs(&p.b.rcq, N, "receive completions");
    let swcs = wait_wcs(&p.a.scq, N, "send completions");
    for i in 0..N {
        assert!(
            rwcs[i].is_ok() && swcs[i].is_ok(),
            "{:?} {:?}",
            rwcs[i],
            swcs[i]
        );
        assert_eq!(rwcs[i].wr_id, 100 + i as u64);
        assert_eq!(swcs[i].wr_id, 200 + i as u64);
        assert_eq!(dst.to_vec(i * 64, 64), pattern(64, i as u8));
    }
}

#[test]
fn post_list_refusal_names_the_first_wr_not_posted() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(4096);
    let dst = p.b.host.mr_all(4096);
    let max_sge = p.a.qp.cap().max_send_sge as usize;
    for i in 0..2 {
        // SAFETY: `dst` is read only after completion.
        unsafe { post_recv(&p.b.qp, i, &[dst.sge(i as usize * 64, 64)]) };
    }
    let ok0 = [src.sge(0, 8)];
    let ok1 = [src.sge(8, 8)];
    let too_many: Vec<Sge> = (0..=max_sge).map(|i| src.sge(64 + i, 1)).collect();
    let wrs = [
        SendWr::new(0, SendOp::Send, &ok0),
        SendWr::new(1, SendOp::Send, &ok1),
        SendWr::new(2, SendOp::Send, &too_many),
        SendWr::new(3, SendOp::Send, &ok0),
    ];
    // SAFETY: `src` is unchanged for the rest of the test.
    let result = unsafe { p.a.qp.post_send(&wrs) };
    assert_refused(result, 2, PostError::TooManySges);
    // WRs 0 and 1 were posted and complete; nothing after the refused one was.
    let swcs = wait_wcs(&p.a.scq, 2, "the two WRs before the refused one");
    assert_eq!(swcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1]);
    assert!(swcs.iter().all(|w| w.is_ok()), "{swcs:?}");
    assert_eq!(wait_wcs(&p.b.rcq, 2, "receives").len(), 2);
    assert!(poll_now(&p.a.scq).is_empty(), "a WR after the refusal ran");
}

#[test]
fn unsignaled_wrs_complete_without_a_completion() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(256);
    let dst = p.b.host.mr_all(256);
    for i in 0..4u64 {
        // SAFETY: `dst` is read only after completion.
        unsafe { post_recv(&p.b.qp, i, &[dst.sge(i as usize * 64, 64)]) };
    }
    let sges: Vec<[Sge; 1]> = (0..4).map(|i| [src.sge(i * 64, 64)]).collect();
    let wrs: Vec<SendWr> = (0..4)
        .map(|i| {
            let wr = SendWr::new(i as u64, SendOp::Send, &sges[i]);
            // Only the last WR asks for a completion.
            if i == 3 {
                wr
            } else {
                wr.flags(SendFlags::empty())
            }
        })
        .collect();
    // SAFETY: `src` is unchanged until the signaled WR (which follows all) completes.
    unsafe { p.a.qp.post_send(&wrs) }.expect("post_send");

    assert_eq!(wait_wcs(&p.b.rcq, 4, "all four receives").len(), 4);
    let swc = wait_wc(&p.a.scq, "the signaled send");
    // Completions of one send queue are in order, so an unsignaled WR that wrongly
    // produced one would have been polled first.
    assert_eq!(
        swc.wr_id, 3,
        "an unsignaled WR produced a completion: {swc:?}"
    );
    assert!(swc.is_ok());
    assert!(poll_now(&p.a.scq).is_empty());
}

#[test]
fn sq_sig_all_signals_every_wr() {
    let p = RcPair::with(RcOpts {
        sq_sig_all: true,
        ..RcOpts::default()
    });
    let src = p.a.host.mr_all(64);
    let dst = p.b.host.mr_all(64);
    for i in 0..3u64 {
        // SAFETY: `dst` is read only after completion.
        unsafe { post_recv(&p.b.qp, i, &[dst.sge(0, 64)]) };
    }
    let sge = [src.sge(0, 8)];
    for i in 0..3u64 {
        let wr = SendWr::new(i, SendOp::Send, &sge).flags(SendFlags::empty());
        // SAFETY: `src` is unchanged until completion.
        unsafe { post_send(&p.a.qp, wr) };
    }
    let swcs = wait_wcs(&p.a.scq, 3, "a completion for every unflagged WR");
    assert_eq!(swcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(wait_wcs(&p.b.rcq, 3, "receives").len(), 3);
}

#[test]
fn inline_send_copies_payload_at_post_time() {
    let p = RcPair::new();
    let dst = p.b.host.mr_all(256);
    let max_inline = p.a.qp.cap().max_inline_data as usize;
    assert!(max_inline >= 16, "QP granted max_inline_data {max_inline}");
    let len = max_inline.min(64);
    // Unregistered memory: inline data is copied by the post and its lkey is ignored.
    let mut buf = pattern(len, 4);
    let sge = [Sge {
        addr: buf.as_ptr() as u64,
        length: len as u32,
        lkey: 0,
    }];

    // SAFETY: `dst` is read only after completion.
    unsafe { post_recv(&p.b.qp, 1, &[dst.sge(0, 256)]) };
    let wr = SendWr::new(1, SendOp::Send, &sge).flags(SendFlags::SIGNALED | SendFlags::INLINE);
    // SAFETY: inline: `buf` is readable for the duration of the call.
    unsafe { post_send(&p.a.qp, wr) };
    // The contract lets the buffer be reused as soon as the post returns.
    buf.fill(0xee);

    let rwc = wait_wc(&p.b.rcq, "receive completion");
    assert_eq!(rwc.status, WcStatus::Success, "{rwc:?}");
    assert_eq!(rwc.byte_len, len as u32);
    assert_eq!(dst.to_vec(0, len), pattern(len, 4));
    assert!(wait_wc(&p.a.scq, "send completion").is_ok());
}

#[test]
fn inline_send_over_max_inline_is_refused() {
    let p = RcPair::with(RcOpts {
        cap: QpCap {
            max_inline_data: 32,
            ..QpCap::default()
        },
        ..RcOpts::default()
    });
    let granted = p.a.qp.cap().max_inline_data;
    let buf = vec![1u8; granted as usize + 1];
    let sge = [Sge {
        addr: buf.as_ptr() as u64,
        length: granted + 1,
        lkey: 0,
    }];
    let wr = SendWr::new(1, SendOp::Send, &sge).flags(SendFlags::SIGNALED | SendFlags::INLINE);
    // SAFETY: inline: `buf` is readable for the duration of the call.
    let result = unsafe { p.a.qp.post_send(&[wr]) };
    assert_refused(result, 0, PostError::InlineTooLarge);
}

#[test]
fn receive_too_small_fails_with_loc_len_err() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(256);
    let dst = p.b.host.mr_all(256);
    // SAFETY: `dst` is read only after completion.
    unsafe { post_recv(&p.b.qp, 9, &[dst.sge(0, 16)]) };
    let sge = [src.sge(0, 17)];
    // SAFETY: `src` is unchanged until completion.
    unsafe { post_send(&p.a.qp, SendWr::new(3, SendOp::Send, &sge)) };

    let rwc = wait_wc(&p.b.rcq, "the receive's completion");
    assert_eq!(rwc.wr_id, 9);
    let quirk = Some(&RXE_RECV_TOO_SMALL);
    assert_status(&p.b.host.dev, &rwc, WcStatus::LocLenErr, quirk);
    // The responder NAKs with Invalid Request, which the requester reports as such.
    let swc = wait_wc(&p.a.scq, "the send's completion");
    assert_eq!(swc.wr_id, 3);
    let quirk = Some(&RXE_RECV_TOO_SMALL_NAK);
    assert_status(&p.a.host.dev, &swc, WcStatus::RemInvReqErr, quirk);
}
