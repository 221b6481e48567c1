//! The RDMA Reads this process's [`Reader`](super::Reader)s have begun and not yet
//! finished, and their bytes: a fact for pollers. A poller about to sleep while
//! the only Read in flight is one it will reap may do better to spin on for it
//! (rpc-core's completion policy decides when).

use std::sync::atomic::{AtomicU64, Ordering};

static READS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

/// Reads (whole messages, each one or more Read WRs) in flight in this process,
/// and their bytes. Two loads, not one snapshot: good for a policy, not for a sum.
pub fn reads_in_flight() -> (u64, u64) {
    (READS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed))
}

/// One read of a message, counted while held.
pub(super) struct InFlight(u64);

impl InFlight {
    pub(super) fn new(len: usize) -> InFlight {
        let len = len as u64;
        READS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(len, Ordering::Relaxed);
        InFlight(len)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        READS.fetch_sub(1, Ordering::Relaxed);
        BYTES.fetch_sub(self.0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Other tests' reads may come and go meanwhile: a length no read of theirs
    /// reaches tells this one's bytes apart.
    #[test]
    fn a_read_counts_while_it_is_held() {
        const LEN: usize = 1 << 50;
        let read = InFlight::new(LEN);
        let (reads, bytes) = reads_in_flight();
        assert!(
            reads >= 1 && bytes >= LEN as u64,
            "{reads} reads of {bytes} B"
        );
        drop(read);
        assert!(reads_in_flight().1 < LEN as u64, "its bytes went with it");
    }
}
