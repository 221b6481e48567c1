//! Completion queues (`ibv_cq`), each with its own completion channel.
//!
//! One channel per CQ keeps the event path simple: the channel's fd is the CQ's
//! [`Cq::event_fd`], registered with tokio by the neutral layer, and every event read
//! from it belongs to this CQ, so [`Cq::consume_events`] can acknowledge them at once.
//! Busy polling never touches the channel.

use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::error::{check, errno_of, last_error, set_nonblocking};
use super::ffi;
use super::wc;
use super::Device;
use crate::error::{Error, Result};
use crate::wc::WorkCompletion;

/// Completions fetched per `ibv_poll_cq` call (a stack batch; one call drains many).
const POLL_BATCH: usize = 16;

/// A completion queue with its channel; keeps the device open.
pub(crate) struct Cq {
    cq: NonNull<ffi::ibv_cq>,
    channel: NonNull<ffi::ibv_comp_channel>,
    capacity: u32,
    _dev: Arc<Device>,
}

// SAFETY: ibv_poll_cq, ibv_req_notify_cq and the channel calls are thread-safe in
// libibverbs (providers lock the CQ); the other fields are immutable.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    pub(super) fn create(dev: &Arc<Device>, cqe: u32) -> Result<Arc<Cq>> {
        let cqe = i32::try_from(cqe.max(1))
            .map_err(|_| Error::InvalidArgument(format!("CQ size {cqe} too large")))?;
        // SAFETY: live context (held by `dev`).
        let channel = NonNull::new(unsafe { ffi::ibv_create_comp_channel(dev.ctx()) })
            .ok_or_else(|| last_error("ibv_create_comp_channel"))?;
        // SAFETY: `channel` was just created and is valid.
        let fd = unsafe { (*channel.as_ptr()).fd };
        let destroy_channel = || {
            // SAFETY: no CQ uses the channel yet; destroyed once on this error path.
            unsafe { ffi::ibv_destroy_comp_channel(channel.as_ptr()) };
        };
        if let Err(e) = set_nonblocking("ibv_create_comp_channel", fd) {
            destroy_channel();
            return Err(e);
        }
        // SAFETY: live context and channel of the same context.
        let cq =
            unsafe { ffi::ibv_create_cq(dev.ctx(), cqe, ptr::null_mut(), channel.as_ptr(), 0) };
        let Some(cq) = NonNull::new(cq) else {
            let e = last_error("ibv_create_cq");
            destroy_channel();
            return Err(e);
        };
        // SAFETY: `cq` was just created; `cqe` holds the granted size.
        let capacity = unsafe { (*cq.as_ptr()).cqe } as u32;
        Ok(Arc::new(Cq {
            cq,
            channel,
            capacity,
            _dev: dev.clone(),
        }))
    }

    pub(super) fn raw(&self) -> *mut ffi::ibv_cq {
        self.cq.as_ptr()
    }

    pub(crate) fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        let mut raw: [MaybeUninit<ffi::ibv_wc>; POLL_BATCH] =
            [const { MaybeUninit::uninit() }; POLL_BATCH];
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(POLL_BATCH);
            // SAFETY: live CQ; `raw` has room for `want` entries, the provider writes
            // the first `n` it returns.
            let n = unsafe { ffi::ibv_poll_cq(self.raw(), want as i32, raw.as_mut_ptr().cast()) };
            if n < 0 {
                let errno = errno_of(n);
                return Err(Error::verb(
                    "ibv_poll_cq",
                    std::io::Error::from_raw_os_error(errno),
                ));
            }
            let n = n as usize;
            for (slot, r) in out[done..done + n].iter_mut().zip(&raw[..n]) {
                // SAFETY: the provider initialised the first `n` entries.
                *slot = wc::from_raw(unsafe { r.assume_init_ref() });
            }
            done += n;
            if n < want {
                break; // drained
            }
        }
        Ok(done)
    }

    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: live CQ created with a channel.
        check("ibv_req_notify_cq", unsafe {
            ffi::ibv_req_notify_cq(self.raw(), i32::from(solicited_only))
        })
    }

    pub(crate) fn event_fd(&self) -> RawFd {
        // SAFETY: the channel lives as long as `self`; `fd` never changes.
        unsafe { (*self.channel.as_ptr()).fd }
    }

    /// Reads every pending event from the (non-blocking) channel and acknowledges them
    /// in one `ibv_ack_cq_events`, which `ibv_destroy_cq` requires before it returns.
    pub(crate) fn consume_events(&self) {
        let mut n: u32 = 0;
        loop {
            let mut ev_cq = ptr::null_mut();
            let mut ev_ctx = ptr::null_mut();
            // SAFETY: live channel, non-blocking; out-pointers are valid locals.
            let ret =
                unsafe { ffi::ibv_get_cq_event(self.channel.as_ptr(), &mut ev_cq, &mut ev_ctx) };
            if ret != 0 {
                break; // EAGAIN: none left
            }
            debug_assert_eq!(ev_cq, self.raw(), "channel is private to this CQ");
            n += 1;
        }
        if n > 0 {
            // SAFETY: live CQ; exactly the `n` events read above are acknowledged.
            unsafe { ffi::ibv_ack_cq_events(self.raw(), n) };
        }
    }

    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The `ibv_cq` address: unique while the CQ lives, and what async CQ events name.
    pub(crate) fn id(&self) -> u64 {
        self.raw() as u64
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // Unacknowledged events would make ibv_destroy_cq wait forever.
        self.consume_events();
        // SAFETY: QPs hold an `Arc<Cq>`, so none uses it; destroyed once, before its
        // channel.
        let ret = unsafe { ffi::ibv_destroy_cq(self.raw()) };
        if ret != 0 {
            tracing::warn!(ret, "ibv_destroy_cq failed");
        }
        // SAFETY: its only CQ is gone; destroyed once.
        let ret = unsafe { ffi::ibv_destroy_comp_channel(self.channel.as_ptr()) };
        if ret != 0 {
            tracing::warn!(ret, "ibv_destroy_comp_channel failed");
        }
    }
}
