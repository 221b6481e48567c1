//! 64-bit remote atomics: Fetch-and-Add and Compare-and-Swap.
//!
//! Operands are in host byte order in memory, as on rxe and the soft provider.

use rpc_transport::{MemoryRegion, SendOp, SendWr, WcOpcode, WcStatus};

use crate::common::{has_atomics_or_refuses, post_send, wait_wc, RcPair};

fn read_u64(mr: &MemoryRegion, off: usize) -> u64 {
    let mut b = [0u8; 8];
    mr.read(off, &mut b);
    u64::from_ne_bytes(b)
}

/// Runs one atomic from `a` and returns the value it fetched into `local`.
fn run(p: &RcPair, local: &MemoryRegion, op: SendOp, wr_id: u64) -> u64 {
    let sge = [local.sge(0, 8)];
    // SAFETY: `local` is not touched until the atomic completes (waited for below).
    unsafe { post_send(&p.a.qp, SendWr::new(wr_id, op, &sge)) };
    let wc = wait_wc(&p.a.scq, "the atomic's completion");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(wc.wr_id, wr_id);
    let want = match op {
        SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        _ => WcOpcode::CompSwap,
    };
    assert_eq!(wc.opcode, want);
    read_u64(local, 0)
}

/// A pair with a local and a remote region, or `None` on a device without atomics
/// once its refusal of them has been asserted.
fn pair() -> Option<(RcPair, MemoryRegion, MemoryRegion)> {
    let p = RcPair::new();
    let local = p.a.host.mr_all(8);
    let remote = p.b.host.mr_all(64);
    let r = remote.remote();
    let probe = SendOp::FetchAdd {
        remote_addr: r.addr,
        rkey: r.rkey,
        add: 1,
    };
    if !has_atomics_or_refuses(&p, probe) {
        return None;
    }
    Some((p, local, remote))
}

#[test]
fn fetch_add_returns_the_old_value_and_adds() {
    let Some((p, local, remote)) = pair() else {
        return;
    };
    remote.write(8, &100u64.to_ne_bytes());
    let r = remote.remote();
    let op = |add| SendOp::FetchAdd {
        remote_addr: r.addr + 8,
        rkey: r.rkey,
        add,
    };
    assert_eq!(run(&p, &local, op(5), 1), 100);
    assert_eq!(read_u64(&remote, 8), 105);
    assert_eq!(run(&p, &local, op(u64::MAX), 2), 105, "wraps");
    assert_eq!(read_u64(&remote, 8), 104);
    assert_eq!(read_u64(&remote, 0), 0, "neighbouring word untouched");
    assert_eq!(read_u64(&remote, 16), 0, "neighbouring word untouched");
}

#[test]
fn compare_swap_swaps_only_on_match() {
    let Some((p, local, remote)) = pair() else {
        return;
    };
    remote.write(8, &7u64.to_ne_bytes());
    let r = remote.remote();
    let op = |compare, swap| SendOp::CompareSwap {
        remote_addr: r.addr + 8,
        rkey: r.rkey,
        compare,
        swap,
    };
    assert_eq!(run(&p, &local, op(6, 99), 1), 7, "mismatch fetches");
    assert_eq!(read_u64(&remote, 8), 7, "mismatch must not swap");
    assert_eq!(run(&p, &local, op(7, 99), 2), 7, "match fetches");
    assert_eq!(read_u64(&remote, 8), 99, "match swaps");
}
