//! Shared receive queues: one pool of receives for many QPs.

use std::sync::Arc;

use crate::dispatch::dispatch;
use crate::error::Result;
use crate::event::ObjectId;
use crate::soft;
use crate::wr::RecvWr;

/// Creation attributes (`struct ibv_srq_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInitAttr {
    /// Receive WRs it can hold.
    pub max_wr: u32,
    /// Scatter entries per WR.
    pub max_sge: u32,
    /// Low watermark: when the number of posted receives falls below it, an
    /// [`crate::AsyncEvent::SrqLimitReached`] is raised once (0 = disarmed).
    pub srq_limit: u32,
}

impl Default for SrqInitAttr {
    fn default() -> Self {
        SrqInitAttr {
            max_wr: 1024,
            max_sge: 1,
            srq_limit: 0,
        }
    }
}

#[derive(Clone)]
pub(crate) enum SrqImp {
    Soft(Arc<soft::Srq>),
    #[cfg(feature = "rdma")]
    Verbs(Arc<crate::verbs::Srq>),
}

/// A shared receive queue (`ibv_srq`).
pub struct SharedReceiveQueue {
    pub(crate) imp: SrqImp,
    attr: SrqInitAttr,
}

impl SharedReceiveQueue {
    pub(crate) fn new(imp: SrqImp, attr: SrqInitAttr) -> Self {
        SharedReceiveQueue { imp, attr }
    }

    /// Posts receives to the shared pool.
    ///
    /// # Safety
    /// Every SGE must name memory of a live memory region of this PD that is neither
    /// read nor written by the program, and stays registered, until the receive's
    /// completion has been polled (or the SRQ and every QP using it are destroyed).
    pub unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        // SAFETY: forwarded contract.
        dispatch!(&self.imp, SrqImp, s => unsafe { s.post_recv(wrs) })
    }

    /// Arms the low-watermark event at `limit` posted receives (`ibv_modify_srq`
    /// with `IBV_SRQ_LIMIT`).
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        dispatch!(&self.imp, SrqImp, s => s.arm_limit(limit))
    }

    /// Creation attributes.
    pub fn attr(&self) -> &SrqInitAttr {
        &self.attr
    }

    /// Identity used in [`crate::AsyncEvent::SrqLimitReached`].
    pub fn id(&self) -> ObjectId {
        ObjectId(dispatch!(&self.imp, SrqImp, s => s.id()))
    }
}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("attr", &self.attr)
            .finish()
    }
}
