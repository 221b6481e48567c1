//! A soft SRQ's idle posted receives give their pages back (`release_free_heap`), and
//! a receive whose pages went back still takes its message whole.

use super::*;
use crate::{SendOp, SrqInitAttr};

const SLOTS: usize = 256;
const SLOT: usize = 8192;
const PAGE: usize = 4096;

/// Which pages of `[addr, addr + len)` are resident.
fn resident(addr: u64, len: usize) -> Vec<bool> {
    let mut v = vec![0u8; len / PAGE];
    // SAFETY: `addr` is page-aligned (a region's start plus whole slots) and the range
    // is mapped (the region is alive); `v` has one byte per page.
    let rc = unsafe { libc::mincore(addr as *mut libc::c_void, len, v.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    v.iter().map(|b| b & 1 == 1).collect()
}

#[test]
fn idle_receives_give_their_pages_back_and_still_receive_whole() {
    let server = Device::open_soft(SoftConfig::default()).unwrap();
    let client = Device::open_soft(SoftConfig::default()).unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (
        server.create_cq(2 * SLOTS as u32).unwrap(),
        client.create_cq(2 * SLOTS as u32).unwrap(),
    );
    let srq = spd
        .create_srq(&SrqInitAttr {
            max_wr: SLOTS as u32,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let smr = spd.alloc_mr(SLOTS * SLOT, ALL).unwrap();
    // Every page touched, as a burst of traffic leaves a pool.
    smr.write(0, &vec![0xee; SLOTS * SLOT]);
    let base = smr.sge(0, 0).addr;
    assert!(resident(base, SLOTS * SLOT).iter().all(|&r| r));
    post_srq_slots(&srq, &smr, SLOTS, SLOT);

    crate::release_free_heap();
    // The SRQ hands out its newest receive first: the few posted last stay
    // resident, the ones posted before them are dropped.
    let pages = resident(base, SLOTS * SLOT);
    let per_slot = SLOT / PAGE;
    let kept = super::super::idle_receives::KEEP_NEWEST;
    let old = (SLOTS - kept) * per_slot;
    assert!(
        pages[..old].iter().all(|&r| !r),
        "{} of the {old} idle receive pages still resident",
        pages[..old].iter().filter(|&&r| r).count()
    );
    assert!(
        pages[old..].iter().all(|&r| r),
        "the newest receives were dropped"
    );

    // Every receive, dropped or not, takes a full message intact.
    let (_sqp, cqp) = srq_pair((&spd, &scq, &srq), (&cpd, &ccq));
    let cmr = cpd.alloc_mr(SLOT, ALL).unwrap();
    for n in 0..SLOTS {
        let body: Vec<u8> = (0..SLOT).map(|i| (i * 7 + n) as u8).collect();
        cmr.write(0, &body);
        let sge = [cmr.sge(0, SLOT as u32)];
        // SAFETY: `cmr` is not written again until this Send's completion below.
        unsafe { cqp.post_send(&[SendWr::new(n as u64, SendOp::Send, &sge)]) }.unwrap();
        assert!(wait(&ccq, &[&scq]).is_ok());
        let r = wait(&scq, &[&ccq]);
        assert!(r.is_ok() && r.byte_len as usize == SLOT, "{r:?}");
        assert_eq!(
            smr.to_vec(r.wr_id as usize * SLOT, SLOT),
            body,
            "message {n} in receive {}",
            r.wr_id
        );
    }
}
