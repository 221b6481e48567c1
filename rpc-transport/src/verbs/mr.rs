//! Memory registrations (`ibv_mr`).

use std::ptr::NonNull;
use std::sync::Arc;

use super::error::last_error;
use super::ffi;
use super::Pd;
use crate::access::AccessFlags;
use crate::error::Result;
use crate::mr_buffer::MrBuffer;

/// A registration of an [`MrBuffer`]. It holds the buffer and the PD: the NIC may
/// access the memory for as long as the registration exists, so the memory must not be
/// freed before `ibv_dereg_mr` returns (`Drop::drop` runs before the fields drop).
pub(crate) struct Mr {
    mr: NonNull<ffi::ibv_mr>,
    lkey: u32,
    rkey: u32,
    _buf: Arc<MrBuffer>,
    _pd: Arc<Pd>,
}

// SAFETY: the registration is an immutable kernel object once created; dereg happens
// once, in Drop.
unsafe impl Send for Mr {}
// SAFETY: `&Mr` only reads the cached keys.
unsafe impl Sync for Mr {}

impl Mr {
    pub(super) fn register(pd: &Arc<Pd>, buf: Arc<MrBuffer>, access: AccessFlags) -> Result<Mr> {
        // SAFETY: live PD; `buf` is a live allocation of at least `len` bytes that this
        // registration keeps alive (it owns an `Arc`) until after it is deregistered.
        let mr = unsafe {
            ffi::ibv_reg_mr(
                pd.raw(),
                buf.as_ptr().cast(),
                buf.len(),
                access_to_raw(access),
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| last_error("ibv_reg_mr"))?;
        // SAFETY: `mr` was just returned by ibv_reg_mr and is valid until dereg.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        Ok(Mr {
            mr,
            lkey,
            rkey,
            _buf: buf,
            _pd: pd.clone(),
        })
    }

    pub(crate) fn lkey(&self) -> u32 {
        self.lkey
    }

    pub(crate) fn rkey(&self) -> u32 {
        self.rkey
    }

    /// What a bind WR names the region by.
    pub(crate) fn handle(&self) -> usize {
        self.mr.as_ptr() as usize
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered in `register`, deregistered once; the buffer and PD are
        // still alive (fields drop after this).
        let ret = unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) };
        if ret != 0 {
            tracing::warn!(ret, "ibv_dereg_mr failed");
        }
    }
}

/// [`AccessFlags`] to `enum ibv_access_flags`.
pub(super) fn access_to_raw(a: AccessFlags) -> std::os::raw::c_int {
    use ffi::ibv_access_flags as F;
    let mut raw = 0;
    for (ours, theirs) in [
        (AccessFlags::LOCAL_WRITE, F::IBV_ACCESS_LOCAL_WRITE),
        (AccessFlags::REMOTE_WRITE, F::IBV_ACCESS_REMOTE_WRITE),
        (AccessFlags::REMOTE_READ, F::IBV_ACCESS_REMOTE_READ),
        (AccessFlags::REMOTE_ATOMIC, F::IBV_ACCESS_REMOTE_ATOMIC),
        (AccessFlags::MW_BIND, F::IBV_ACCESS_MW_BIND),
    ] {
        if a.contains(ours) {
            raw |= theirs.0;
        }
    }
    raw as std::os::raw::c_int
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_map_to_ibverbs_bits() {
        assert_eq!(access_to_raw(AccessFlags::empty()), 0);
        assert_eq!(access_to_raw(AccessFlags::LOCAL_WRITE), 1);
        assert_eq!(
            access_to_raw(AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC),
            4 | 8
        );
        assert_eq!(access_to_raw(AccessFlags::MW_BIND), 16);
    }
}
