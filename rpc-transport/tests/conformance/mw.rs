//! Type-2 memory windows: a window's rkey reaches exactly its bound range, with its
//! rights, from the peer of the QP it was bound on, until it is invalidated or
//! deallocated; binds and invalidations complete in order on the send CQ.
//!
//! `b` lends: its region is registered `LOCAL_WRITE | MW_BIND` (no remote rights of
//! its own) and its windows are bound on `b.qp`; `a` reads. A device without memory
//! windows (siw, the soft `iwarp_like` profile) must refuse `alloc_mw` with
//! `EOPNOTSUPP` and say so in its capabilities: that is asserted instead. rxe checks
//! a Read through a window against the window's region, not the window
//! (`quirks::RXE_MW_RANGE`).

use std::io::Write as _;

use rpc_transport::{
    AccessFlags, Error, MemoryRegion, MemoryWindow, MwBind, QpState, QueuePair, SendOp, SendWr,
    WcOpcode, WcStatus,
};

use crate::common::quirks::{assert_status, RXE_MW_RANGE};
use crate::common::rc::{connect_pair, create_rc_qp, PSN_A, PSN_B};
use crate::common::{pattern, post_recv, post_send, wait_state, wait_wc, wait_wcs, RcOpts};
use crate::common::{RcPair, RcSide};

const LEN: usize = 4096;
/// The window: 512 bytes in the middle of the region.
const AT: u64 = 1024;
const WIN: u64 = 512;

/// A pair, `b`'s region (filled with a pattern) and a window; `None` on a device
/// without memory windows, once its refusal has been asserted.
fn setup() -> Option<(RcPair, MemoryRegion, MemoryWindow)> {
    let p = RcPair::new();
    let caps = p.b.host.dev.caps();
    assert_eq!(
        caps.mw_type2,
        p.b.host.dev.attr().mw_type2,
        "caps() and attr() disagree"
    );
    let mw = match p.b.host.pd.alloc_mw() {
        Ok(mw) => {
            assert!(caps.mw_type2, "a device without MWs allocated one");
            mw
        }
        Err(Error::Verb { verb, source })
            if verb == "ibv_alloc_mw" && source.raw_os_error() == Some(libc::EOPNOTSUPP) =>
        {
            assert!(!caps.mw_type2, "a device with MWs refused one");
            let _ = writeln!(
                std::io::stderr(),
                "conformance: device {} has no memory windows: ibv_alloc_mw refused with EOPNOTSUPP",
                p.b.host.dev.name()
            );
            return None;
        }
        Err(e) => panic!("ibv_alloc_mw: {e}"),
    };
    let mr =
        p.b.host
            .mr(LEN, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    mr.write(0, &pattern(LEN, 3));
    Some((p, mr, mw))
}

/// Binds `mw` on `qp` to `len` bytes at offset `at` of `mr` for remote Read; returns
/// the new rkey and the bind's completion.
fn bind(
    side: &RcSide,
    mw: &MemoryWindow,
    mr: &MemoryRegion,
    at: u64,
    len: u64,
) -> (u32, rpc_transport::WorkCompletion) {
    let bind = MwBind {
        mr,
        addr: mr.addr() + at,
        len,
        access: AccessFlags::REMOTE_READ,
    };
    let rkey = side.qp.post_bind_mw(77, mw, &bind).expect("post bind");
    let wc = wait_wc(&side.scq, "the bind's completion");
    // (An error completion's opcode is undefined.)
    assert_eq!(wc.wr_id, 77, "{wc:?}");
    (rkey, wc)
}

fn bind_ok(side: &RcSide, mw: &MemoryWindow, mr: &MemoryRegion) -> u32 {
    let (rkey, wc) = bind(side, mw, mr, AT, WIN);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::BindMw),
        "{wc:?}"
    );
    assert_eq!(rkey, mw.rkey());
    rkey
}

/// `a` reads `len` bytes at offset `at` of `b`'s region through `rkey` into a fresh
/// region; returns the status and what landed.
fn read(
    p: &RcPair,
    qp: &QueuePair,
    scq: &rpc_transport::CompletionQueue,
    mr: &MemoryRegion,
    at: u64,
    len: u32,
    rkey: u32,
) -> (WcStatus, Vec<u8>) {
    let local = p.a.host.mr_all(len as usize);
    let sge = [local.sge(0, len)];
    let op = SendOp::RdmaRead {
        remote_addr: mr.addr() + at,
        rkey,
    };
    // SAFETY: `local` outlives the completion waited for below.
    unsafe { post_send(qp, SendWr::new(5, op, &sge)) };
    let wc = wait_wc(scq, "the Read's completion");
    assert_eq!(wc.wr_id, 5);
    (wc.status, local.to_vec(0, len as usize))
}

fn read_a(p: &RcPair, mr: &MemoryRegion, at: u64, len: u32, rkey: u32) -> (WcStatus, Vec<u8>) {
    read(p, &p.a.qp, &p.a.scq, mr, at, len, rkey)
}

fn invalidate(side: &RcSide, rkey: u32) {
    side.qp
        .post_local_inv(78, rkey)
        .expect("post local invalidate");
    let wc = wait_wc(&side.scq, "the invalidation's completion");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (78, WcOpcode::LocalInv, WcStatus::Success),
        "{wc:?}"
    );
}

/// A failed Read leaves nothing behind and the reader in ERR.
fn assert_refused_read(p: &RcPair, got: (WcStatus, Vec<u8>)) {
    assert_eq!(got.0, WcStatus::RemAccessErr);
    assert!(got.1.iter().all(|&b| b == 0), "bytes were read");
    wait_state(&p.a.qp, QpState::Err, "the reader to enter ERR");
}

#[test]
fn bind_then_read_gets_exactly_the_window_in_wr_order() {
    let Some((p, mr, mw)) = setup() else { return };
    // A Send before the bind completes before it.
    let dst = p.a.host.mr_all(8);
    let src = p.b.host.mr_all(8);
    // SAFETY: `dst` and `src` outlive the completions waited for below.
    unsafe {
        post_recv(&p.a.qp, 1, &[dst.sge(0, 8)]);
        post_send(&p.b.qp, SendWr::new(2, SendOp::Send, &[src.sge(0, 8)]));
    }
    let bind = MwBind {
        mr: &mr,
        addr: mr.addr() + AT,
        len: WIN,
        access: AccessFlags::REMOTE_READ,
    };
    let rkey = p.b.qp.post_bind_mw(3, &mw, &bind).expect("post bind");
    let wcs = wait_wcs(&p.b.scq, 2, "the Send's and the bind's completions");
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
    assert_eq!(
        got,
        [
            (2, WcOpcode::Send, WcStatus::Success),
            (3, WcOpcode::BindMw, WcStatus::Success)
        ]
    );
    assert_eq!(
        rkey >> 8,
        mw.rkey() >> 8,
        "a bind changes only the key byte"
    );

    let want = pattern(LEN, 3);
    let (st, bytes) = read_a(&p, &mr, AT, WIN as u32, rkey);
    assert_eq!(st, WcStatus::Success);
    assert_eq!(bytes, &want[AT as usize..(AT + WIN) as usize]);
    let (st, bytes) = read_a(&p, &mr, AT + 100, 8, rkey);
    assert_eq!(st, WcStatus::Success, "a piece of the window");
    assert_eq!(bytes, &want[AT as usize + 100..AT as usize + 108]);
}

/// A Read inside the region but not inside the window fails; on rxe, which checks
/// only the region ([`RXE_MW_RANGE`]), it reads the region's bytes.
fn assert_outside_window(p: &RcPair, mr: &MemoryRegion, at: u64, rkey: u32) {
    let (st, bytes) = read_a(p, mr, at, 16, rkey);
    let wc = rpc_transport::WorkCompletion {
        status: st,
        ..Default::default()
    };
    assert_status(
        &p.a.host.dev,
        &wc,
        WcStatus::RemAccessErr,
        Some(&RXE_MW_RANGE),
    );
    if st == WcStatus::Success {
        assert_eq!(bytes, &pattern(LEN, 3)[at as usize..at as usize + 16]);
        return;
    }
    assert_refused_read(p, (st, bytes));
}

#[test]
fn read_past_the_window_fails_with_rem_access_err() {
    let Some((p, mr, mw)) = setup() else { return };
    let rkey = bind_ok(&p.b, &mw, &mr);
    // Inside the region, but 8 bytes past the window's end.
    assert_outside_window(&p, &mr, AT + WIN - 8, rkey);
}

#[test]
fn read_before_the_window_fails_with_rem_access_err() {
    let Some((p, mr, mw)) = setup() else { return };
    let rkey = bind_ok(&p.b, &mw, &mr);
    assert_outside_window(&p, &mr, AT - 8, rkey);
}

#[test]
fn the_regions_own_rkey_reads_nothing() {
    let Some((p, mr, mw)) = setup() else { return };
    bind_ok(&p.b, &mw, &mr);
    let got = read_a(&p, &mr, AT, 16, mr.rkey());
    assert_refused_read(&p, got);
}

#[test]
fn read_after_invalidate_fails_with_rem_access_err() {
    let Some((p, mr, mw)) = setup() else { return };
    let rkey = bind_ok(&p.b, &mw, &mr);
    assert_eq!(read_a(&p, &mr, AT, 16, rkey).0, WcStatus::Success);
    invalidate(&p.b, rkey);
    let got = read_a(&p, &mr, AT, 16, rkey);
    assert_refused_read(&p, got);
}

#[test]
fn read_through_the_window_from_another_qp_of_the_pd_fails() {
    let Some((p, mr, mw)) = setup() else { return };
    let rkey = bind_ok(&p.b, &mw, &mr);
    // A second connection into `b`'s PD: `c` on a new host, `d` on `b`'s.
    let opts = RcOpts::default();
    let c = RcSide::new(&opts);
    let dcq = p.b.host.cq(16);
    let d = create_rc_qp(&p.b.host, &dcq, &dcq, None, &opts);
    connect_pair(&d, PSN_A, &c.qp, PSN_B, &opts);
    let local = c.host.mr_all(16);
    let sge = [local.sge(0, 16)];
    let op = SendOp::RdmaRead {
        remote_addr: mr.addr() + AT,
        rkey,
    };
    // SAFETY: `local` outlives the completion waited for below.
    unsafe { post_send(&c.qp, SendWr::new(6, op, &sge)) };
    let wc = wait_wc(&c.scq, "the other connection's Read");
    assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
    assert!(
        local.to_vec(0, 16).iter().all(|&b| b == 0),
        "bytes were read"
    );
    // The QP it is bound on still reads.
    assert_eq!(read_a(&p, &mr, AT, 16, rkey).0, WcStatus::Success);
}

#[test]
fn rebinding_gives_a_new_rkey_and_the_old_one_reads_nothing() {
    let Some((p, mr, mw)) = setup() else { return };
    let old = bind_ok(&p.b, &mw, &mr);
    invalidate(&p.b, old);
    let new = bind_ok(&p.b, &mw, &mr);
    assert_ne!(new, old);
    assert_eq!(read_a(&p, &mr, AT, 16, new).0, WcStatus::Success);
    let got = read_a(&p, &mr, AT, 16, old);
    assert_refused_read(&p, got);
}

/// A bind the device refuses completes with MW_BIND_ERR and moves the QP to ERR.
fn assert_bind_refused(p: &RcPair, wc: rpc_transport::WorkCompletion) {
    assert_eq!(wc.status, WcStatus::MwBindErr, "{wc:?}");
    wait_state(&p.b.qp, QpState::Err, "the binder to enter ERR");
}

#[test]
fn binding_a_window_still_bound_fails() {
    let Some((p, mr, mw)) = setup() else { return };
    bind_ok(&p.b, &mw, &mr);
    let (_, wc) = bind(&p.b, &mw, &mr, 0, 64);
    assert_bind_refused(&p, wc);
}

#[test]
fn binding_beyond_the_region_fails() {
    let Some((p, mr, mw)) = setup() else { return };
    let (_, wc) = bind(&p.b, &mw, &mr, LEN as u64 - 64, 128);
    assert_bind_refused(&p, wc);
}

#[test]
fn binding_to_a_region_without_mw_bind_fails() {
    let Some((p, _, mw)) = setup() else { return };
    let plain =
        p.b.host
            .mr(LEN, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
    let (_, wc) = bind(&p.b, &mw, &plain, AT, WIN);
    assert_bind_refused(&p, wc);
}

#[test]
fn dealloc_while_bound_ends_the_window() {
    let Some((p, mr, mw)) = setup() else { return };
    let rkey = bind_ok(&p.b, &mw, &mr);
    assert_eq!(read_a(&p, &mr, AT, 16, rkey).0, WcStatus::Success);
    drop(mw);
    let got = read_a(&p, &mr, AT, 16, rkey);
    assert_refused_read(&p, got);
}
