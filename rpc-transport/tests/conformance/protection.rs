//! Keys, bounds and access rights, checked on every access: a local violation
//! completes with LOC_PROT_ERR at the poster, a remote one with REM_ACCESS_ERR at the
//! requester; either way the requester's QP enters ERR and the memory is untouched.

use rpc_transport::{AccessFlags, MemoryRegion, QpState, SendOp, SendWr, Sge, WcStatus};

use crate::common::quirks::{assert_status, Quirk, RXE_UNKNOWN_LKEY};
use crate::common::{
    has_atomics_or_refuses, pattern, post_send, wait_state, wait_wc, Host, RcPair,
};

/// Posts `op` from `p.a` with gather/scatter list `sges` and expects it to fail with
/// `status` (or the device's documented `quirk`), leaving the QP in ERR.
fn expect_failure_or(
    p: &RcPair,
    op: SendOp,
    sges: &[Sge],
    status: WcStatus,
    quirk: Option<&Quirk>,
) {
    // SAFETY: every region named by `sges` lives until the end of the calling test,
    // after the completion waited for below.
    unsafe { post_send(&p.a.qp, SendWr::new(99, op, sges)) };
    let wc = wait_wc(&p.a.scq, "the failing WR's completion");
    assert_eq!(wc.wr_id, 99);
    assert_status(&p.a.host.dev, &wc, status, quirk);
    wait_state(&p.a.qp, QpState::Err, "the requester to enter ERR");
}

/// [`expect_failure_or`] for a status every device reports alike.
fn expect_failure(p: &RcPair, op: SendOp, sges: &[Sge], status: WcStatus) {
    expect_failure_or(p, op, sges, status, None);
}

/// A key the device has handed out and since revoked.
fn stale_keys(host: &Host) -> (u32, u32) {
    let gone = host.mr_all(64);
    (gone.lkey(), gone.rkey())
}

fn zeroed(mr: &MemoryRegion) -> bool {
    mr.to_vec(0, mr.len()).iter().all(|&b| b == 0)
}

#[test]
fn send_with_revoked_lkey_fails_with_loc_prot_err() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(64);
    let (lkey, _) = stale_keys(&p.a.host);
    let sge = [Sge {
        lkey,
        ..src.sge(0, 64)
    }];
    let quirk = Some(&RXE_UNKNOWN_LKEY);
    expect_failure_or(&p, SendOp::Send, &sge, WcStatus::LocProtErr, quirk);
}

#[test]
fn send_sge_past_mr_end_fails_with_loc_prot_err() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(4096);
    let sge = [src.sge(4000, 200)];
    expect_failure(&p, SendOp::Send, &sge, WcStatus::LocProtErr);
}

#[test]
fn rdma_read_into_mr_without_local_write_fails_with_loc_prot_err() {
    let p = RcPair::new();
    let local = p.a.host.mr(64, AccessFlags::empty());
    let source = p.b.host.mr_all(64);
    source.write(0, &pattern(64, 1));
    let r = source.remote();
    let op = SendOp::RdmaRead {
        remote_addr: r.addr,
        rkey: r.rkey,
    };
    expect_failure(&p, op, &[local.sge(0, 64)], WcStatus::LocProtErr);
    assert!(zeroed(&local), "a region without LOCAL_WRITE was written");
}

#[test]
fn rdma_write_with_revoked_rkey_fails_with_rem_access_err() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(64);
    let target = p.b.host.mr_all(64);
    let (_, rkey) = stale_keys(&p.b.host);
    let op = SendOp::RdmaWrite {
        remote_addr: target.addr(),
        rkey,
    };
    src.write(0, &pattern(64, 2));
    expect_failure(&p, op, &[src.sge(0, 64)], WcStatus::RemAccessErr);
    assert!(zeroed(&target));
}

#[test]
fn rdma_write_past_remote_mr_end_fails_with_rem_access_err() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(64);
    let target = p.b.host.mr_all(4096);
    let r = target.remote();
    let op = SendOp::RdmaWrite {
        remote_addr: r.addr + r.len - 10,
        rkey: r.rkey,
    };
    src.write(0, &pattern(64, 3));
    expect_failure(&p, op, &[src.sge(0, 20)], WcStatus::RemAccessErr);
    assert!(zeroed(&target), "a partial write happened");
}

#[test]
fn rdma_write_without_remote_write_access_fails_with_rem_access_err() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(64);
    let target =
        p.b.host
            .mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
    let r = target.remote();
    let op = SendOp::RdmaWrite {
        remote_addr: r.addr,
        rkey: r.rkey,
    };
    src.write(0, &pattern(64, 4));
    expect_failure(&p, op, &[src.sge(0, 64)], WcStatus::RemAccessErr);
    assert!(zeroed(&target));
}

#[test]
fn rdma_read_without_remote_read_access_fails_with_rem_access_err() {
    let p = RcPair::new();
    let local = p.a.host.mr_all(64);
    let source =
        p.b.host
            .mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    source.write(0, &pattern(64, 5));
    let r = source.remote();
    let op = SendOp::RdmaRead {
        remote_addr: r.addr,
        rkey: r.rkey,
    };
    expect_failure(&p, op, &[local.sge(0, 64)], WcStatus::RemAccessErr);
    assert!(zeroed(&local), "bytes were read without REMOTE_READ");
}

#[test]
fn atomic_without_remote_atomic_access_fails_with_rem_access_err() {
    let p = RcPair::new();
    let local = p.a.host.mr_all(8);
    let target = p.b.host.mr(
        64,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
    );
    let r = target.remote();
    let op = SendOp::FetchAdd {
        remote_addr: r.addr,
        rkey: r.rkey,
        add: 1,
    };
    if !has_atomics_or_refuses(&p, op) {
        return;
    }
    expect_failure(&p, op, &[local.sge(0, 8)], WcStatus::RemAccessErr);
    assert!(zeroed(&target), "the add happened without REMOTE_ATOMIC");
}
