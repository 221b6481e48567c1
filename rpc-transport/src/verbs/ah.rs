//! Address handles (`ibv_ah`) and the address vector conversion they share with RC
//! QPs at RTR.

use std::ptr::NonNull;
use std::sync::Arc;

use super::error::last_error;
use super::ffi;
use super::Pd;
use crate::ah::AhAttr;
use crate::error::Result;

/// A UD address handle; keeps its PD alive.
pub(crate) struct Ah {
    ah: NonNull<ffi::ibv_ah>,
    _pd: Arc<Pd>,
}

// SAFETY: an ibv_ah is immutable after creation; posting with it from any thread is
// allowed by libibverbs.
unsafe impl Send for Ah {}
// SAFETY: as above.
unsafe impl Sync for Ah {}

impl Ah {
    pub(super) fn create(pd: &Arc<Pd>, attr: &AhAttr) -> Result<Arc<Ah>> {
        let mut raw = ah_attr_to_raw(attr);
        // SAFETY: live PD; `raw` is a fully initialised ibv_ah_attr.
        let ah = NonNull::new(unsafe { ffi::ibv_create_ah(pd.raw(), &mut raw) })
            .ok_or_else(|| last_error("ibv_create_ah"))?;
        Ok(Arc::new(Ah {
            ah,
            _pd: pd.clone(),
        }))
    }

    /// The handle for a UD WR. Providers copy the address vector into the WQE at post
    /// time, so the AH need not outlive the WR.
    pub(super) fn raw(&self) -> *mut ffi::ibv_ah {
        self.ah.as_ptr()
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created in `create`, destroyed once; the PD is still alive.
        let ret = unsafe { ffi::ibv_destroy_ah(self.raw()) };
        if ret != 0 {
            tracing::warn!(ret, "ibv_destroy_ah failed");
        }
    }
}

/// [`AhAttr`] to `struct ibv_ah_attr` (`is_global` set exactly when a GRH is given,
/// which RoCE requires).
pub(super) fn ah_attr_to_raw(a: &AhAttr) -> ffi::ibv_ah_attr {
    let grh = a.grh.unwrap_or_default();
    ffi::ibv_ah_attr {
        grh: ffi::ibv_global_route {
            dgid: ffi::ibv_gid { raw: grh.dgid.0 },
            flow_label: grh.flow_label,
            sgid_index: grh.sgid_index,
            hop_limit: grh.hop_limit,
            traffic_class: grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: u8::from(a.grh.is_some()),
        port_num: a.port_num,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::{Gid, QpEndpoint};

    #[test]
    fn endpoint_with_gid_becomes_global_route() {
        let ep = QpEndpoint {
            lid: 0,
            qpn: 17,
            psn: 1,
            gid: Gid([7; 16]),
        };
        let raw = ah_attr_to_raw(&AhAttr::from_endpoint(&ep, 1));
        assert_eq!(raw.is_global, 1);
        assert_eq!(raw.port_num, 1);
        assert_eq!(raw.grh.sgid_index, 1);
        // SAFETY: the test wrote `raw`.
        assert_eq!(unsafe { raw.grh.dgid.raw }, [7; 16]);
        let ib = ah_attr_to_raw(&AhAttr {
            dlid: 5,
            ..AhAttr::default()
        });
        assert_eq!((ib.is_global, ib.dlid), (0, 5));
    }
}
