//! The message path allocates nothing once warm: a counting allocator (per thread, so
//! helper threads and other tests do not interfere) watches a same-thread ping-pong.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use super::*;
use crate::{RecvWr, SendFlags, SendOp, SendWr, WcOpcode};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; the counter is a const-initialised
// thread-local `Cell`, which never allocates or re-enters the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded contract.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

/// One round trip: a → b (Send), b → a (Send), every completion reaped.
fn round_trip(a: &Side, b: &Side, i: u64) {
    for (from, to) in [(a, b), (b, a)] {
        let rsge = [to.mr.sge(0, 64)];
        // SAFETY: the MR outlives the QPs' use of it.
        unsafe {
            to.qp.post_recv(&[RecvWr {
                wr_id: i,
                sg_list: &rsge,
            }])
        }
        .unwrap();
        let sge = [from.mr.sge(64, 64)];
        let wr = SendWr::new(i, SendOp::Send, &sge).flags(SendFlags::SIGNALED);
        // SAFETY: as above.
        unsafe { from.qp.post_send(&[wr]) }.unwrap();
        let r = wait(&to.cq, &[&from.cq]);
        assert_eq!((r.opcode, r.byte_len), (WcOpcode::Recv, 64));
        let s = wait(&from.cq, &[&to.cq]);
        assert!(s.is_ok());
    }
}

#[test]
fn a_warm_ping_pong_allocates_nothing() {
    let (a, b) = rc_pair();
    for i in 0..200 {
        round_trip(&a, &b, i);
    }
    let before = allocs();
    for i in 0..1000 {
        round_trip(&a, &b, i);
    }
    assert_eq!(allocs() - before, 0, "allocations on the message path");
    // The counter does see this thread's allocations.
    let v = std::hint::black_box(vec![1u8; 8]);
    assert_eq!(allocs() - before, 1);
    drop(v);
}

/// One 1 MiB Send a → b and one 1 MiB Read of b's memory by a, every completion reaped.
fn bulk_round(a: &Side, b: &Side, src: &MemoryRegion, dst: &MemoryRegion, i: u64) {
    const LEN: u32 = 1 << 20;
    let rsge = [dst.sge(0, LEN)];
    // SAFETY: the MRs outlive the QPs' use of them.
    unsafe {
        b.qp.post_recv(&[RecvWr {
            wr_id: i,
            sg_list: &rsge,
        }])
    }
    .unwrap();
    let sge = [src.sge(0, LEN)];
    // SAFETY: as above.
    unsafe { a.qp.post_send(&[SendWr::new(i, SendOp::Send, &sge)]) }.unwrap();
    assert_eq!(wait(&b.cq, &[&a.cq]).byte_len, LEN);
    assert!(wait(&a.cq, &[&b.cq]).is_ok());
    let r = dst.remote();
    let op = SendOp::RdmaRead {
        remote_addr: r.addr,
        rkey: r.rkey,
    };
    // SAFETY: as above.
    unsafe { a.qp.post_send(&[SendWr::new(i, op, &sge)]) }.unwrap();
    let w = wait(&a.cq, &[&b.cq]);
    assert_eq!((w.opcode, w.byte_len), (WcOpcode::RdmaRead, LEN));
}

#[test]
fn warm_large_sends_and_reads_allocate_nothing() {
    let (a, b) = rc_pair();
    let src = a.pd.alloc_mr(1 << 20, ALL).unwrap();
    let dst = b.pd.alloc_mr(1 << 20, ALL).unwrap();
    for i in 0..10 {
        bulk_round(&a, &b, &src, &dst, i);
    }
    let before = allocs();
    for i in 0..50 {
        bulk_round(&a, &b, &src, &dst, i);
    }
    assert_eq!(allocs() - before, 0, "allocations on the bulk path");
}
