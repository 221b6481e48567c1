//! `OneRead`: a single RDMA Read into a region of its own, with a safe API, for
//! tools and tests that act as a raw peer (the framework's reads go through
//! [`super::Reader`] and its pool).
//!
//! The destination region is owned by the `OneRead` until the Read's completion is
//! handed to [`OneRead::finish`]. Dropped before that (a caller that gave up or
//! panicked), it leaks the region instead of freeing memory the device may still
//! write: a leak is safe, a freed destination is not.

use crate::access::AccessFlags;
use crate::error::Result;
use crate::mr::MemoryRegion;
use crate::pd::ProtectionDomain;
use crate::qp::QueuePair;
use crate::wc::{WcStatus, WorkCompletion};
use crate::wr::{SendOp, SendWr};

/// A posted RDMA Read whose destination waits for its completion.
pub struct OneRead {
    /// `None` once finished.
    into: Option<MemoryRegion>,
    wr_id: u64,
    len: u32,
}

impl OneRead {
    /// Posts a signaled Read of `len` bytes at the peer's `addr` under `rkey` into a
    /// fresh zeroed region of `pd`, as WR `wr_id` on `qp` (`len` 0 reads nothing but
    /// still completes).
    pub fn post(
        qp: &QueuePair,
        pd: &ProtectionDomain,
        wr_id: u64,
        addr: u64,
        rkey: u32,
        len: u32,
    ) -> Result<OneRead> {
        let into = pd.alloc_mr(len.max(1) as usize, AccessFlags::LOCAL_WRITE)?;
        let sge = [into.sge(0, len)];
        let op = SendOp::RdmaRead {
            remote_addr: addr,
            rkey,
        };
        // SAFETY: the SGE names `into`, a live region of `pd` that this function
        // moves into the returned `OneRead`, which neither reads nor writes it until
        // `finish` receives this WR's completion, and forgets it (never frees it) if
        // dropped before then. If the post fails, nothing was posted and `into` drops.
        unsafe { qp.post_send(&[SendWr::new(wr_id, op, &sge)]) }?;
        Ok(OneRead {
            into: Some(into),
            wr_id,
            len,
        })
    }

    /// Whether `wc` is this Read's completion.
    pub fn owns(&self, wc: &WorkCompletion) -> bool {
        wc.wr_id == self.wr_id
    }

    /// Takes this Read's completion: its status and the destination's bytes (all
    /// zero where nothing landed, e.g. after `REM_ACCESS_ERR`).
    ///
    /// # Panics
    /// If `wc` is not this Read's completion (see [`OneRead::owns`]).
    pub fn finish(mut self, wc: &WorkCompletion) -> (WcStatus, Vec<u8>) {
        assert!(self.owns(wc), "another WR's completion");
        // The Read completed: the device no longer writes the region, it may go.
        let into = self.into.take().expect("finished once (it takes self)");
        (wc.status, into.to_vec(0, self.len as usize))
    }
}

impl Drop for OneRead {
    fn drop(&mut self) {
        // Unfinished, the Read may still land: the region is leaked, not freed.
        if let Some(into) = self.into.take() {
            tracing::debug!(
                wr_id = self.wr_id,
                "an unfinished RDMA Read leaks its region"
            );
            std::mem::forget(into);
        }
    }
}
