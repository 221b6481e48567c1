//! The QP state machine: flushing in ERR, refused transitions, and posting only in
//! states that allow it.

use rpc_transport::{
    AccessFlags, AhAttr, CompletionQueue, Error, Mtu, PostError, QpAttr, QpEndpoint, QpInitAttr,
    QpState, QpType, QueuePair, RecvWr, SendOp, SendWr, WcStatus,
};

use crate::common::rc::create_rc_qp;
use crate::common::{
    assert_refused, has_ud_or_refuses_it, post_recv, post_send, wait_wcs, Host, RcOpts, RcPair,
};

#[test]
fn moving_to_err_flushes_posted_receives() {
    let p = RcPair::new();
    let dst = p.b.host.mr_all(256);
    for i in 0..3u64 {
        // SAFETY: `dst` is never read; it outlives the flush completions.
        unsafe { post_recv(&p.b.qp, 10 + i, &[dst.sge(i as usize * 64, 64)]) };
    }
    p.b.qp
        .modify(QpState::Err, &QpAttr::default())
        .expect("modify to ERR");
    assert_eq!(p.b.qp.state(), QpState::Err);

    let wcs = wait_wcs(&p.b.rcq, 3, "flushed receives");
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!(wc.status, WcStatus::WrFlushErr, "{wc:?}");
        assert_eq!(wc.wr_id, 10 + i as u64, "flushed out of order");
        assert_eq!(wc.qp_num, p.b.qp.qp_num());
    }
}

#[test]
fn moving_to_err_flushes_outstanding_sends() {
    // Infinite RNR retries: with no receive at the peer, the sends stay outstanding.
    let p = RcPair::with(RcOpts {
        rnr: Some((1, 7)),
        ..RcOpts::default()
    });
    let src = p.a.host.mr_all(64);
    let sge = [src.sge(0, 64)];
    for i in 0..3u64 {
        // SAFETY: `src` outlives the flush completions.
        unsafe { post_send(&p.a.qp, SendWr::new(20 + i, SendOp::Send, &sge)) };
    }
    p.a.qp
        .modify(QpState::Err, &QpAttr::default())
        .expect("modify to ERR");

    let wcs = wait_wcs(&p.a.scq, 3, "flushed sends");
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!(wc.status, WcStatus::WrFlushErr, "{wc:?}");
        assert_eq!(wc.wr_id, 20 + i as u64, "flushed out of order");
        assert_eq!(wc.qp_num, p.a.qp.qp_num());
    }
}

/// An RC QP in RESET on `host`, with the CQs it uses.
fn reset_qp(host: &Host) -> (QueuePair, [CompletionQueue; 2]) {
    let cqs = [host.cq(16), host.cq(16)];
    let qp = create_rc_qp(host, &cqs[0], &cqs[1], None, &RcOpts::default());
    (qp, cqs)
}

/// Complete INIT -> RTR attributes (towards a QP number nobody uses).
fn rtr_attr(host: &Host) -> QpAttr {
    let ep = QpEndpoint {
        qpn: 1,
        gid: host
            .dev
            .gid(1, host.dev.preferred_gid_index())
            .expect("ibv_query_gid"),
        ..Default::default()
    };
    let ah = AhAttr::from_endpoint(&ep, host.dev.preferred_gid_index());
    QpAttr::rc_rtr(ah, 1, 0, Mtu::Mtu1024)
}

#[test]
fn transitions_outside_the_state_machine_are_refused() {
    let host = Host::open();
    let (qp, _cqs) = reset_qp(&host);
    let refused = |to, attr: &QpAttr, from| {
        let err = qp
            .modify(to, attr)
            .expect_err("transition outside the table");
        assert!(
            matches!(err, Error::InvalidTransition { from: f, to: t } if f == from && t == to),
            "{from:?} -> {to:?}: expected InvalidTransition, got {err:?}"
        );
        assert_eq!(qp.state(), from, "a refused modify changed the state");
    };
    // Skipping states, with every attribute the target state would need.
    refused(QpState::Rtr, &rtr_attr(&host), QpState::Reset);
    refused(QpState::Rts, &QpAttr::rc_rts(0), QpState::Reset);
    qp.modify(QpState::Init, &QpAttr::rc_init(AccessFlags::empty()))
        .expect("RESET -> INIT");
    refused(QpState::Rts, &QpAttr::rc_rts(0), QpState::Init);
    // Going back, other than to RESET or ERR.
    qp.modify(QpState::Rtr, &rtr_attr(&host))
        .expect("INIT -> RTR");
    refused(
        QpState::Init,
        &QpAttr::rc_init(AccessFlags::empty()),
        QpState::Rtr,
    );
    // ERR leads only to RESET.
    qp.modify(QpState::Err, &QpAttr::default())
        .expect("RTR -> ERR");
    refused(QpState::Rts, &QpAttr::rc_rts(0), QpState::Err);
    qp.modify(QpState::Reset, &QpAttr::default())
        .expect("ERR -> RESET");
    assert_eq!(qp.state(), QpState::Reset);
}

#[test]
fn transitions_missing_a_required_attribute_are_refused() {
    let host = Host::open();
    let (qp, cqs) = reset_qp(&host);
    let missing = |qp: &QueuePair, to, attr: &QpAttr, name: &str| {
        let from = qp.state();
        let err = qp.modify(to, attr).expect_err("missing attribute");
        assert!(
            matches!(err, Error::MissingAttribute { to: t, attribute } if t == to && attribute == name),
            "{from:?} -> {to:?}: expected MissingAttribute({name}), got {err:?}"
        );
        assert_eq!(qp.state(), from, "a refused modify changed the state");
    };
    let no_access = QpAttr {
        access_flags: None,
        ..QpAttr::rc_init(AccessFlags::empty())
    };
    missing(&qp, QpState::Init, &no_access, "access_flags");
    qp.modify(QpState::Init, &QpAttr::rc_init(AccessFlags::empty()))
        .expect("RESET -> INIT");
    let no_dest = QpAttr {
        dest: None,
        ..rtr_attr(&host)
    };
    missing(&qp, QpState::Rtr, &no_dest, "dest");
    qp.modify(QpState::Rtr, &rtr_attr(&host))
        .expect("INIT -> RTR");
    let no_rnr = QpAttr {
        rnr_retry: None,
        ..QpAttr::rc_rts(0)
    };
    missing(&qp, QpState::Rts, &no_rnr, "rnr_retry");

    // A UD QP needs its Q_Key.
    if !has_ud_or_refuses_it() {
        return;
    }
    let ud = host
        .pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cqs[0], &cqs[1]))
        .expect("ibv_create_qp (UD)");
    let no_qkey = QpAttr {
        qkey: None,
        ..QpAttr::ud_init(1)
    };
    missing(&ud, QpState::Init, &no_qkey, "qkey");
}

#[test]
fn posting_sends_before_rts_is_refused() {
    let host = Host::open();
    let (qp, _cqs) = reset_qp(&host);
    let src = host.mr_all(64);
    let sge = [src.sge(0, 8)];
    for state in [QpState::Reset, QpState::Init] {
        if state == QpState::Init {
            qp.modify(QpState::Init, &QpAttr::rc_init(AccessFlags::empty()))
                .expect("RESET -> INIT");
        }
        assert_eq!(qp.state(), state);
        // SAFETY: `src` outlives the test; the post is expected to be refused.
        let result = unsafe { qp.post_send(&[SendWr::new(1, SendOp::Send, &sge)]) };
        assert_refused(result, 0, PostError::InvalidState);
    }
}

#[test]
fn receives_are_refused_in_reset_and_accepted_from_init() {
    let host = Host::open();
    let (qp, _cqs) = reset_qp(&host);
    let dst = host.mr_all(64);
    let sge = [dst.sge(0, 64)];
    let wr = [RecvWr {
        wr_id: 1,
        sg_list: &sge,
    }];
    // SAFETY: `dst` outlives the QP's use of it; it is never read.
    let result = unsafe { qp.post_recv(&wr) };
    assert_refused(result, 0, PostError::InvalidState);
    qp.modify(QpState::Init, &QpAttr::rc_init(AccessFlags::empty()))
        .expect("RESET -> INIT");
    // SAFETY: as above.
    unsafe { qp.post_recv(&wr) }.expect("post_recv in INIT");
}

#[test]
fn wrs_behind_a_failed_wr_are_flushed() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(4096);
    let dst = p.b.host.mr_all(4096);
    for i in 0..3u64 {
        // SAFETY: `dst` outlives the test and is never read.
        unsafe { post_recv(&p.b.qp, i, &[dst.sge(i as usize * 64, 64)]) };
    }
    let bad = [src.sge(4090, 64)]; // runs past the end of `src`
    let good = [src.sge(0, 64)];
    let wrs = [
        SendWr::new(1, SendOp::Send, &bad),
        SendWr::new(2, SendOp::Send, &good),
        SendWr::new(3, SendOp::Send, &good),
    ];
    // SAFETY: `src` outlives the completions waited for below and is not written.
    unsafe { p.a.qp.post_send(&wrs) }.expect("post_send");

    let wcs = wait_wcs(&p.a.scq, 3, "the failed WR and the two behind it");
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(wcs[0].status, WcStatus::LocProtErr, "{:?}", wcs[0]);
    for wc in &wcs[1..] {
        assert_eq!(wc.status, WcStatus::WrFlushErr, "{wc:?}");
    }
}
