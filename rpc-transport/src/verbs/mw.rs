//! Type-2 memory windows (`ibv_mw`): allocated here, bound and invalidated by WRs
//! (`post.rs`).

use std::ptr::NonNull;
use std::sync::Arc;

use super::error::last_error;
use super::ffi;
use super::Pd;
use crate::error::Result;

/// A window; keeps its PD alive, deallocated on drop.
pub(crate) struct Mw {
    mw: NonNull<ffi::ibv_mw>,
    _pd: Arc<Pd>,
}

// SAFETY: an ibv_mw may be used from any thread; its `rkey` field is written only by
// `set_rkey`, which `post_bind_mw` calls under the window's bind lock, as it posts.
unsafe impl Send for Mw {}
// SAFETY: as above.
unsafe impl Sync for Mw {}

impl Pd {
    pub(crate) fn alloc_mw(self: &Arc<Self>) -> Result<Mw> {
        // SAFETY: live PD; the bindings' `ibv_alloc_mw` sets errno when the provider
        // has no `alloc_mw` op, as libibverbs does.
        let raw = unsafe { ffi::ibv_alloc_mw(self.raw(), ffi::ibv_mw_type::IBV_MW_TYPE_2) };
        let mw = raw
            .and_then(NonNull::new)
            .ok_or_else(|| last_error("ibv_alloc_mw"))?;
        Ok(Mw {
            mw,
            _pd: self.clone(),
        })
    }
}

impl Mw {
    /// The rkey allocation gave (read once, when the neutral window is made, before
    /// any bind can write it).
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: live window; no bind has been posted yet (see above).
        unsafe { (*self.mw.as_ptr()).rkey }
    }

    /// What a bind WR names it by.
    pub(crate) fn handle(&self) -> usize {
        self.mw.as_ptr() as usize
    }

    /// Records the rkey a posted bind gives the window: a type-2 bind names the
    /// window by its current rkey (rxe compares it), and only the application knows
    /// the new one.
    pub(crate) fn set_rkey(&self, rkey: u32) {
        // SAFETY: live window; `post_bind_mw` holds the window's bind lock across its
        // post (where the provider reads the field) and this write, so neither races.
        unsafe { (*self.mw.as_ptr()).rkey = rkey };
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        // SAFETY: allocated in `alloc_mw`, deallocated once; the PD is still alive.
        let ret = unsafe { ffi::ibv_dealloc_mw(self.mw.as_ptr()) };
        if ret != 0 {
            tracing::warn!(ret, "ibv_dealloc_mw failed");
        }
    }
}
