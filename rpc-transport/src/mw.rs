//! Memory windows (type 2): a remote key for one range of a registered region,
//! bound and invalidated by work requests on one RC QP, so that a peer reaches only
//! what is lent to it now, on that connection.
//!
//! The region is registered with [`AccessFlags::MW_BIND`] (and no remote rights of
//! its own); [`QueuePair::post_bind_mw`] gives the window a new rkey (the key's low
//! byte advances, [`inc_rkey`]) over `[addr, addr + len)` with the rights asked;
//! [`SendOp::LocalInv`] with that rkey ends it. A type-2
//! window is valid only on the QP it was bound on, and must be invalidated before it
//! is bound again. Both WRs complete in order on the send CQ like any other.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::access::AccessFlags;
use crate::dispatch::dispatch;
use crate::error::{Error, PostError, Result};
use crate::mr::{MemoryRegion, MrImp};
use crate::qp::QueuePair;
use crate::soft;
use crate::wr::{MwBindOp, SendOp, SendWr};

pub(crate) enum MwImp {
    Soft(soft::Mw),
    #[cfg(feature = "rdma")]
    Verbs(crate::verbs::Mw),
}

/// A type-2 memory window (`ibv_mw`), allocated by
/// [`crate::ProtectionDomain::alloc_mw`]. Dropping it deallocates it, which also
/// invalidates a binding still in place; drop it only once no WR that names it is
/// outstanding (after its QP's completions, or after the QP is gone).
pub struct MemoryWindow {
    pub(crate) imp: MwImp,
    /// The rkey of the latest bind posted (at first, the one allocation gave).
    rkey: AtomicU32,
    /// Held across a bind's post and the rkey update after it: the verbs provider
    /// reads the `ibv_mw`'s rkey inside the post, and we write it after.
    binding: Mutex<()>,
}

/// The next rkey of a window: the same index, the low 8 bits (the "key") plus one,
/// as `ibv_inc_rkey`.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// What to bind a window to.
#[derive(Debug, Clone, Copy)]
pub struct MwBind<'a> {
    /// The region, registered with [`AccessFlags::MW_BIND`] in the window's PD.
    pub mr: &'a MemoryRegion,
    /// First byte of the window (a virtual address inside the region).
    pub addr: u64,
    /// Length in bytes (not zero).
    pub len: u64,
    /// Remote rights the window grants (e.g. `REMOTE_READ`).
    pub access: AccessFlags,
}

impl MemoryWindow {
    pub(crate) fn new(imp: MwImp) -> MemoryWindow {
        let rkey = dispatch!(&imp, MwImp, m => m.rkey());
        MemoryWindow {
            imp,
            rkey: AtomicU32::new(rkey),
            binding: Mutex::new(()),
        }
    }

    /// The rkey of the latest bind posted: what a peer names the window by. Valid
    /// for remote access once that bind completed, until it is invalidated.
    pub fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Relaxed)
    }

    fn handle(&self) -> usize {
        dispatch!(&self.imp, MwImp, m => m.handle())
    }
}

impl QueuePair {
    /// Posts a signaled bind of `mw` to `bind` on this RC QP's send queue and returns
    /// the window's new rkey ([`inc_rkey`] of its current one). The bind completes
    /// (`WcOpcode::BindMw`) in order with the QP's other send WRs; a bind the device
    /// refuses (range outside the region, a region without `MW_BIND` or in another
    /// PD, a window still bound) completes with `MwBindErr` and moves the QP to ERR,
    /// as hardware does.
    ///
    /// Safe, unlike `post_send`: a bind names no memory the device writes or reads
    /// later, and providers copy the WR (keys, not pointers) before the post returns.
    /// Keep `mw` and `bind.mr` until the WR completes all the same: a window or a
    /// region gone before its bind executes makes the bind fail (`MwBindErr`). Binds
    /// of one window from several threads are serialised.
    pub fn post_bind_mw(&self, wr_id: u64, mw: &MemoryWindow, bind: &MwBind<'_>) -> Result<u32> {
        let mr = match (&mw.imp, &bind.mr.imp) {
            (MwImp::Soft(_), MrImp::Soft(m)) => m.lkey() as usize,
            #[cfg(feature = "rdma")]
            (MwImp::Verbs(_), MrImp::Verbs(m)) => m.handle(),
            #[cfg(feature = "rdma")]
            _ => return Err(Error::ProviderMismatch),
        };
        if bind.len == 0 {
            return Err(Error::Post {
                index: 0,
                reason: PostError::Os(libc::EINVAL),
            });
        }
        let _serial = mw.binding.lock().unwrap_or_else(|e| e.into_inner());
        let op = MwBindOp {
            mw: mw.handle(),
            mr,
            addr: bind.addr,
            len: bind.len,
            access: bind.access,
            rkey: inc_rkey(mw.rkey()),
        };
        // SAFETY: a bind has no gather list, so it names no memory the device could
        // access after the post; providers read the window and region at post time.
        unsafe { self.post_send(&[SendWr::new(wr_id, SendOp::BindMw(op), &[])])? };
        #[cfg(feature = "rdma")]
        if let MwImp::Verbs(m) = &mw.imp {
            m.set_rkey(op.rkey);
        }
        mw.rkey.store(op.rkey, Ordering::Relaxed);
        Ok(op.rkey)
    }

    /// Posts a signaled invalidation of `rkey` (a window's current rkey); it
    /// completes (`WcOpcode::LocalInv`) in order with the QP's other send WRs.
    pub fn post_local_inv(&self, wr_id: u64, rkey: u32) -> Result<()> {
        // SAFETY: an invalidation names no local memory.
        unsafe { self.post_send(&[SendWr::new(wr_id, SendOp::LocalInv { rkey }, &[])]) }
    }
}

impl std::fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_changes_only_the_key_byte() {
        assert_eq!(inc_rkey(0x1234_5601), 0x1234_5602);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
    }
}
