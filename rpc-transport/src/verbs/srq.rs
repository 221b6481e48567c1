//! Shared receive queues (`ibv_srq`).

use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::error::{check, last_error};
use super::ffi;
use super::post;
use super::Pd;
use crate::error::Result;
use crate::srq::SrqInitAttr;
use crate::wr::RecvWr;

/// A shared receive queue; keeps its PD alive (QPs using it hold an `Arc<Srq>`).
pub(crate) struct Srq {
    srq: NonNull<ffi::ibv_srq>,
    /// Scatter entries per WR actually granted.
    max_sge: u32,
    _pd: Arc<Pd>,
}

// SAFETY: ibv_post_srq_recv and ibv_modify_srq are thread-safe in libibverbs.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

impl Srq {
    pub(super) fn create(pd: &Arc<Pd>, attr: &SrqInitAttr) -> Result<Arc<Srq>> {
        let mut init = ffi::ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: ffi::ibv_srq_attr {
                max_wr: attr.max_wr,
                max_sge: attr.max_sge,
                srq_limit: attr.srq_limit,
            },
        };
        // SAFETY: live PD; `init` is initialised and receives the granted sizes.
        let srq = NonNull::new(unsafe { ffi::ibv_create_srq(pd.raw(), &mut init) })
            .ok_or_else(|| last_error("ibv_create_srq"))?;
        let srq = Srq {
            srq,
            // ibv_create_srq writes the granted sizes (>= those asked) back.
            max_sge: init.attr.max_sge,
            _pd: pd.clone(),
        };
        // The limit is not armed at creation time by every provider: arm it explicitly.
        if attr.srq_limit > 0 {
            srq.arm_limit(attr.srq_limit)?;
        }
        Ok(Arc::new(srq))
    }

    pub(super) fn raw(&self) -> *mut ffi::ibv_srq {
        self.srq.as_ptr()
    }

    /// # Safety
    /// The neutral `SharedReceiveQueue::post_recv` contract: SGE memory stays owned
    /// until the receive completes.
    pub(crate) unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        // SAFETY: forwarded contract; the SRQ is live.
        unsafe { post::post_srq_recv(self, wrs, self.max_sge) }
    }

    pub(crate) fn arm_limit(&self, limit: u32) -> Result<()> {
        let mut a = MaybeUninit::<ffi::ibv_srq_attr>::zeroed();
        // SAFETY: plain data, zero is valid; only `srq_limit` is read by the verb.
        let a = unsafe {
            (*a.as_mut_ptr()).srq_limit = limit;
            a.assume_init_mut()
        };
        // SAFETY: live SRQ; `a` is initialised.
        check("ibv_modify_srq", unsafe {
            ffi::ibv_modify_srq(
                self.raw(),
                a,
                ffi::ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32,
            )
        })
    }

    /// The `ibv_srq` address: what `IBV_EVENT_SRQ_LIMIT_REACHED` names.
    pub(crate) fn id(&self) -> u64 {
        self.raw() as u64
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: QPs using it hold an `Arc<Srq>`, so none is left; destroyed once.
        let ret = unsafe { ffi::ibv_destroy_srq(self.raw()) };
        if ret != 0 {
            tracing::warn!(ret, "ibv_destroy_srq failed");
        }
    }
}
