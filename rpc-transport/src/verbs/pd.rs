//! Protection domains (`ibv_pd`) and what they create.

use std::ptr::NonNull;
use std::sync::Arc;

use super::error::last_error;
use super::ffi;
use super::{Ah, Cq, Device, Mr, Qp, Srq};
use crate::access::AccessFlags;
use crate::ah::AhAttr;
use crate::error::Result;
use crate::mr_buffer::MrBuffer;
use crate::qp::QpCap;
use crate::qp_state::QpType;
use crate::srq::SrqInitAttr;

/// A protection domain; keeps its device open.
pub(crate) struct Pd {
    pd: NonNull<ffi::ibv_pd>,
    dev: Arc<Device>,
}

// SAFETY: an ibv_pd may be used from any thread; libibverbs serialises internally.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub(super) fn alloc(dev: &Arc<Device>) -> Result<Arc<Pd>> {
        // SAFETY: live context (held by `dev`).
        let pd = NonNull::new(unsafe { ffi::ibv_alloc_pd(dev.ctx()) })
            .ok_or_else(|| last_error("ibv_alloc_pd"))?;
        Ok(Arc::new(Pd {
            pd,
            dev: dev.clone(),
        }))
    }

    pub(super) fn raw(&self) -> *mut ffi::ibv_pd {
        self.pd.as_ptr()
    }

    pub(super) fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// Registers `buf`; the registration keeps both the buffer and this PD alive.
    pub(crate) fn register(
        self: &Arc<Self>,
        buf: Arc<MrBuffer>,
        access: AccessFlags,
    ) -> Result<Mr> {
        Mr::register(self, buf, access)
    }

    pub(crate) fn create_qp(
        self: &Arc<Self>,
        qp_type: QpType,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        srq: Option<&Arc<Srq>>,
        cap: &QpCap,
        sq_sig_all: bool,
    ) -> Result<Arc<Qp>> {
        Qp::create(self, qp_type, send_cq, recv_cq, srq, cap, sq_sig_all)
    }

    pub(crate) fn create_srq(self: &Arc<Self>, attr: &SrqInitAttr) -> Result<Arc<Srq>> {
        Srq::create(self, attr)
    }

    pub(crate) fn create_ah(self: &Arc<Self>, attr: &AhAttr) -> Result<Arc<Ah>> {
        Ah::create(self, attr)
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: MRs, QPs, SRQs and AHs hold an `Arc<Pd>`, so none is left; freed once.
        let ret = unsafe { ffi::ibv_dealloc_pd(self.raw()) };
        if ret != 0 {
            tracing::warn!(ret, "ibv_dealloc_pd failed");
        }
    }
}
