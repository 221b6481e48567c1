//! Receiver Not Ready: a Send or Write-with-Imm meeting no posted receive is retried per
//! the QP's RNR settings, then fails with RNR_RETRY_EXC_ERR.

use rpc_transport::{QpState, SendOp, SendWr, WcStatus};

use crate::common::wait::poll_now;
use crate::common::{
    has_imm_or_refuses, post_recv, post_send, wait_state, wait_wc, RcOpts, RcPair,
};

/// A 10 µs RNR timer (code 1) and one retry: the failure comes fast.
fn impatient() -> RcPair {
    RcPair::with(RcOpts {
        rnr: Some((1, 1)),
        ..RcOpts::default()
    })
}

#[test]
fn send_without_receive_fails_with_rnr_retry_exc_err() {
    let p = impatient();
    let src = p.a.host.mr_all(64);
    let sge = [src.sge(0, 64)];
    // SAFETY: `src` outlives the completion.
    unsafe { post_send(&p.a.qp, SendWr::new(5, SendOp::Send, &sge)) };

    let wc = wait_wc(&p.a.scq, "the send's RNR failure");
    assert_eq!(wc.wr_id, 5);
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr, "{wc:?}");
    wait_state(&p.a.qp, QpState::Err, "the requester to enter ERR");
}

#[test]
fn write_with_imm_without_receive_fails_with_rnr_retry_exc_err() {
    let p = impatient();
    let src = p.a.host.mr_all(64);
    let target = p.b.host.mr_all(64);
    let r = target.remote();
    let sge = [src.sge(0, 64)];
    let op = SendOp::RdmaWriteWithImm {
        remote_addr: r.addr,
        rkey: r.rkey,
        imm: 1,
    };
    if !has_imm_or_refuses(&p, op) {
        return;
    }
    // SAFETY: `src` outlives the completion.
    unsafe { post_send(&p.a.qp, SendWr::new(6, op, &sge)) };

    let wc = wait_wc(&p.a.scq, "the write's RNR failure");
    assert_eq!(wc.wr_id, 6);
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr, "{wc:?}");
    wait_state(&p.a.qp, QpState::Err, "the requester to enter ERR");
}

#[test]
fn send_is_retried_until_a_receive_is_posted() {
    // Infinite RNR retries (7) with a 10 µs timer.
    let p = RcPair::with(RcOpts {
        rnr: Some((1, 7)),
        ..RcOpts::default()
    });
    let src = p.a.host.mr_all(64);
    let dst = p.b.host.mr_all(64);
    src.write(0, b"late receive");
    let sge = [src.sge(0, 12)];
    // SAFETY: `src` outlives the completion.
    unsafe { post_send(&p.a.qp, SendWr::new(1, SendOp::Send, &sge)) };
    // With no receive at the responder the Send cannot have completed, in any way.
    assert!(
        poll_now(&p.a.scq).is_empty(),
        "a Send completed before any receive existed"
    );

    // SAFETY: `dst` is read only after completion.
    unsafe { post_recv(&p.b.qp, 2, &[dst.sge(0, 64)]) };
    let rwc = wait_wc(&p.b.rcq, "the retried send's receive");
    assert_eq!(rwc.status, WcStatus::Success, "{rwc:?}");
    assert_eq!(dst.to_vec(0, 12), b"late receive");
    let swc = wait_wc(&p.a.scq, "the retried send's completion");
    assert_eq!(swc.status, WcStatus::Success, "{swc:?}");
    assert!(poll_now(&p.b.rcq).is_empty(), "delivered twice");
}
