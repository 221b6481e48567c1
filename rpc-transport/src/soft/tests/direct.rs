//! Read responses placed into the requester with one copy (`shm::direct`): bytes
//! arrive intact, the responder's checks still decide every access, and the ring
//! carries them when direct copies are off.

use super::shm::soft;
use super::*;
use crate::{SendOp, SoftLink, WcOpcode, WcStatus};

/// `a` Reads `len` bytes of `from` at `off` into `into` at `at`; returns the completion.
fn read(
    a: &Side,
    b: &Side,
    from: &MemoryRegion,
    off: u64,
    into: &MemoryRegion,
    at: usize,
    len: u32,
) -> WorkCompletion {
    let r = from.remote();
    let op = SendOp::RdmaRead {
        remote_addr: r.addr + off,
        rkey: r.rkey,
    };
    post(a, SendWr::new(7, op, &[into.sge(at, len)]));
    wait(&a.cq, &[&b.cq])
}

/// A Read of several MiB (not a multiple of the placed segment, at odd offsets) is
/// placed byte for byte, and the responder's statistics say its bytes went directly;
/// the connection goes on working after it.
#[test]
fn a_read_of_several_mib_is_placed_byte_for_byte() {
    const LEN: usize = (6 << 20) + 12_345;
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    assert!(stats(&a).rc_direct_links >= 1 && stats(&b).rc_direct_links >= 1);
    let remote = b.pd.alloc_mr(LEN + 7, ALL).unwrap();
    let local = a.pd.alloc_mr(LEN + 64, ALL).unwrap();
    let data = pattern(LEN, 5);
    remote.write(7, &data);
    local.write(0, &[0xee; 64]);
    let (before, before_in) = (
        stats(&b).rc_read_bytes_placed,
        stats(&a).rc_read_bytes_placed_by_peer,
    );
    let wc = read(&a, &b, &remote, 7, &local, 3, LEN as u32);
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, LEN as u32)
    );
    assert!(local.to_vec(3, LEN) == data, "the placed bytes differ");
    assert_eq!(
        local.to_vec(0, 3),
        [0xee; 3],
        "bytes before the range moved"
    );
    assert_eq!(
        stats(&b).rc_read_bytes_placed - before,
        LEN as u64,
        "the response did not go directly"
    );
    assert_eq!(
        stats(&a).rc_read_bytes_placed_by_peer - before_in,
        LEN as u64
    );
    // The requester let go of the destination it offered.
    assert_eq!(soft(&a).lock().rc.as_ref().unwrap().st.placing.len(), 0);
    // Small traffic behind it still flows both ways.
    small_send_flows(&a, &b);
    assert_eq!(
        stats(&a).rc_frames_malformed + stats(&b).rc_frames_malformed,
        0
    );
}

/// The poll that places a Read's response counts its bytes as copied for a peer
/// by the polling thread (`copied_for_peers`), so that a poller spinning for a reply
/// can tell its own work from waiting. Single-segment Reads (256 KiB), each placed
/// whole by this thread's poll of b's CQ, or by b's helper when this thread was
/// kept from polling for a millisecond (a loaded machine): each counts all its
/// bytes here or none, and one at least counts here.
#[test]
fn the_thread_that_places_a_read_counts_the_bytes_it_copied() {
    const LEN: usize = 256 << 10;
    const READS: usize = 20;
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let remote = b.pd.alloc_mr(LEN, ALL).unwrap();
    let local = a.pd.alloc_mr(LEN, ALL).unwrap();
    remote.write(0, &pattern(LEN, 9));
    let mut here = 0;
    for _ in 0..READS {
        let (copied, placed) = (crate::copied_for_peers(), stats(&b).rc_read_bytes_placed);
        let wc = read(&a, &b, &remote, 0, &local, 0, LEN as u32);
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(stats(&b).rc_read_bytes_placed - placed, LEN as u64);
        match crate::copied_for_peers() - copied {
            0 => {}
            n if n == LEN as u64 => here += 1,
            n => panic!("{n} bytes counted for a placed Read of {LEN}"),
        }
    }
    assert!(
        here > 0,
        "none of {READS} placed Reads counted by the thread that polled"
    );
    assert!(local.to_vec(0, LEN) == pattern(LEN, 9));
}

/// A requester asleep on its CQ while a Read of several segments is placed (nobody
/// polls either side: the helper answers for the responder) is woken by the last
/// segment (the earlier ones publish without ringing its bell) and finds its bytes.
#[test]
fn a_sleeping_requester_wakes_for_a_placed_read_of_several_segments() {
    const LEN: usize = (5 << 20) + 4_321;
    let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
    let remote = b.pd.alloc_mr(LEN, ALL).unwrap();
    let local = a.pd.alloc_mr(LEN, ALL).unwrap();
    let data = pattern(LEN, 9);
    remote.write(0, &data);
    let before = stats(&b).rc_read_bytes_placed;
    let wc = block_on(async {
        let r = remote.remote();
        let op = SendOp::RdmaRead {
            remote_addr: r.addr,
            rkey: r.rkey,
        };
        post(&a, SendWr::new(7, op, &[local.sge(0, LEN as u32)]));
        let mut wc = [WorkCompletion::default(); 2];
        let n = tokio::time::timeout(Duration::from_secs(10), a.cq.wait_async(&mut wc))
            .await
            .expect("the sleeping requester was not woken within 10 s")
            .unwrap();
        assert_eq!(n, 1);
        wc[0]
    });
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (7, WcStatus::Success, LEN as u32)
    );
    assert!(local.to_vec(0, LEN) == data, "the placed bytes differ");
    assert_eq!(stats(&b).rc_read_bytes_placed - before, LEN as u64);
}

/// A Read the responder must refuse (beyond its region, a stale rkey, a region without
/// remote read) fails REM_ACCESS_ERR on the direct path exactly as on the ring, and
/// not one byte reaches the destination it offered.
#[test]
fn a_refused_read_fails_remote_access_and_places_nothing() {
    const LEN: usize = 1 << 20;
    for case in ["beyond bounds", "stale rkey", "no remote read"] {
        let (a, b) = pair_on_rings(SoftLink::Auto, SoftLink::Auto);
        assert!(stats(&b).rc_direct_links >= 1, "{case}: no direct link");
        let rights = if case == "no remote read" {
            AccessFlags::LOCAL_WRITE
        } else {
            ALL
        };
        let remote = b.pd.alloc_mr(LEN, rights).unwrap();
        remote.write(0, &pattern(LEN, 9));
        let stale = b.pd.alloc_mr(LEN, ALL).unwrap();
        let from = if case == "stale rkey" {
            let r = stale.remote();
            drop(stale);
            // A region of the same size registered afterwards must not answer to it.
            let _again = b.pd.alloc_mr(LEN, ALL).unwrap();
            (r, LEN as u32)
        } else if case == "beyond bounds" {
            (remote.remote(), LEN as u32 + 1)
        } else {
            (remote.remote(), LEN as u32)
        };
        let local = a.pd.alloc_mr(LEN + 1, ALL).unwrap();
        local.write(0, &vec![0xee; LEN + 1]);
        let op = SendOp::RdmaRead {
            remote_addr: from.0.addr,
            rkey: from.0.rkey,
        };
        post(&a, SendWr::new(7, op, &[local.sge(0, from.1)]));
        let wc = wait(&a.cq, &[&b.cq]);
        assert_eq!(wc.status, WcStatus::RemAccessErr, "{case}: {wc:?}");
        assert!(
            local.to_vec(0, LEN + 1).iter().all(|&x| x == 0xee),
            "{case}: bytes reached the destination"
        );
        assert_eq!(stats(&b).rc_read_bytes_placed, 0, "{case}");
        assert_eq!(soft(&a).lock().rc.as_ref().unwrap().st.placing.len(), 0);
    }
}

/// With direct copies off (on the requester's device, the responder's, or both) a
/// large Read still arrives byte for byte, through the ring: nothing is placed, and
/// the device that would have placed counts the refusal.
#[test]
fn with_direct_copies_off_reads_go_through_the_ring() {
    const LEN: usize = 3 << 20;
    for (la, lb) in [
        (SoftLink::Rings, SoftLink::Rings),
        (SoftLink::Auto, SoftLink::Rings),
        (SoftLink::Rings, SoftLink::Auto),
    ] {
        let (a, b) = pair_on_rings(la, lb);
        let remote = b.pd.alloc_mr(LEN, ALL).unwrap();
        let local = a.pd.alloc_mr(LEN, ALL).unwrap();
        let data = pattern(LEN, 11);
        remote.write(0, &data);
        let wc = read(&a, &b, &remote, 0, &local, 0, LEN as u32);
        assert_eq!(wc.status, WcStatus::Success, "{la:?}/{lb:?}: {wc:?}");
        assert!(local.to_vec(0, LEN) == data, "{la:?}/{lb:?}: bytes differ");
        let (sa, sb) = (stats(&a), stats(&b));
        assert_eq!(sb.rc_read_bytes_placed, 0, "{la:?}/{lb:?}");
        assert_eq!(sa.rc_read_bytes_placed_by_peer, 0, "{la:?}/{lb:?}");
        assert_eq!(sa.rc_direct_links + sb.rc_direct_links, 0, "{la:?}/{lb:?}");
        assert!(
            sa.rc_shm_links >= 1 && sb.rc_shm_links >= 1,
            "{la:?}/{lb:?}"
        );
        // A device with direct copies on probed a peer that offered nothing.
        for (link, s) in [(la, sa), (lb, sb)] {
            let want = u64::from(link == SoftLink::Auto);
            assert_eq!(s.rc_direct_refused, want, "{la:?}/{lb:?}");
        }
    }
}
