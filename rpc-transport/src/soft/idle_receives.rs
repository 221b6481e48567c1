//! Handing the pages of idle posted receives back to the kernel.
//!
//! A soft SRQ hands out its newest receive first, so a server's resident receive
//! memory follows the receives it uses at once, not every slot it posted. But a burst
//! (a thousand clients calling together) touches as many slots as were in use, and
//! those pages stay resident after the burst: capacity-probe and soak, 1,000 RC
//! clients on one server, left ~4 MiB of its 33 MiB receive pool resident after they
//! had all gone. A posted receive's contents are undefined until its completion
//! (verbs), so its whole pages may be dropped (`MADV_DONTNEED`: the next write faults
//! in a zeroed page). Only pages of provider-owned region memory (`MrBuffer`, a
//! private anonymous mapping) inside a receive whose lkey still checks are dropped,
//! under the SRQ's lock, so no receive taken meanwhile can be written into one.
//!
//! A verbs device pins registered memory for the NIC: dropping its pages would part
//! the CPU's view from the NIC's, so nothing like this runs there.

use std::sync::{Mutex, Weak};

use crate::access::AccessFlags;

use super::srq::Srq;

/// The newest receives of each SRQ left resident: the next messages land in them,
/// and a server with calls in flight keeps its working set. Few: each costs a page
/// after a burst (64 kept 216 KiB more than the baseline's, 3 % of a server that
/// 1,000 RC clients had left, capacity-probe), while a receive whose page was
/// dropped costs its next message one page fault.
pub(super) const KEEP_NEWEST: usize = 16;

/// Every soft SRQ of the process, so that one call reaches all of them.
static SRQS: Mutex<Vec<Weak<Srq>>> = Mutex::new(Vec::new());

/// Records `srq` (and forgets the dropped ones).
pub(crate) fn register(srq: Weak<Srq>) {
    let mut all = SRQS.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|s| s.strong_count() > 0);
    all.push(srq);
}

/// Drops the pages of every soft SRQ's posted receives but the newest
/// [`KEEP_NEWEST`]; returns the bytes handed back.
pub(crate) fn release() -> usize {
    let all: Vec<_> = SRQS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    all.iter().map(|srq| srq.release_idle(KEEP_NEWEST)).sum()
}

const PAGE: usize = 4096;

/// The whole pages inside `[start, start + len)`, as a page-aligned range.
pub(super) fn inner_pages(start: usize, len: usize) -> Option<(usize, usize)> {
    let first = start.checked_add(PAGE - 1)? & !(PAGE - 1);
    let end = start.checked_add(len)? & !(PAGE - 1);
    (end > first).then_some((first, end - first))
}

/// Sorts `ranges` and merges the adjacent ones (a pool's slots are back to back:
/// one `madvise` for a run of them).
pub(super) fn coalesce(ranges: &mut Vec<(usize, usize)>) {
    ranges.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for &(at, len) in ranges.iter() {
        match out.last_mut() {
            Some((a, l)) if *a + *l >= at => *l = (*l).max(at + len - *a),
            _ => out.push((at, len)),
        }
    }
    *ranges = out;
}

/// The access a receive needs of its region.
pub(super) const RECV_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_pages_inside_the_range_count() {
        assert_eq!(inner_pages(0, 8192), Some((0, 8192)));
        assert_eq!(inner_pages(1, 8192), Some((4096, 4096)));
        assert_eq!(inner_pages(100, 4000), None);
        assert_eq!(inner_pages(4096, 4095), None);
        assert_eq!(inner_pages(usize::MAX - 10, 5), None);
    }

    #[test]
    fn adjacent_and_overlapping_ranges_merge() {
        let mut r = vec![
            (8192, 4096),
            (0, 4096),
            (4096, 4096),
            (20480, 4096),
            (0, 1024),
        ];
        coalesce(&mut r);
        assert_eq!(r, vec![(0, 12288), (20480, 4096)]);
    }
}
