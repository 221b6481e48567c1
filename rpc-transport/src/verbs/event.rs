//! Asynchronous events (`ibv_get_async_event`) mapped to [`AsyncEvent`].

use std::mem::MaybeUninit;
use std::ptr::addr_of;

use super::ffi;
use crate::event::{AsyncEvent, ObjectId};

/// Reads and acknowledges one event: `None` when none is pending, `Some(None)` for an
/// event this crate has no variant for.
///
/// # Safety
/// `ctx` must be a live context whose async fd is non-blocking (else this sleeps).
pub(super) unsafe fn read_async_event(ctx: *mut ffi::ibv_context) -> Option<Option<AsyncEvent>> {
    let mut ev = MaybeUninit::<ffi::ibv_async_event>::zeroed();
    // SAFETY: live context (caller); `ev` is a writable ibv_async_event.
    if unsafe { ffi::ibv_get_async_event(ctx, ev.as_mut_ptr()) } != 0 {
        return None; // EAGAIN: nothing pending
    }
    // Read the type as the integer the kernel wrote: rdma-sys models it as a Rust enum,
    // and a value this build does not know must not become an invalid enum.
    // SAFETY: the field was written by the verb; `ibv_event_type` is a C enum (u32).
    let kind = unsafe { *(addr_of!((*ev.as_ptr()).event_type) as *const u32) };
    // SAFETY: the union's pointer members are valid for the event kinds that use them
    // (the object stays alive until the event is acknowledged below).
    let mapped = unsafe { map_event(kind, ev.as_ptr()) };
    // SAFETY: the event was obtained above and is acknowledged once.
    unsafe { ffi::ibv_ack_async_event(ev.as_mut_ptr()) };
    if mapped.is_none() {
        tracing::debug!(kind, "unmapped verbs async event acknowledged");
    }
    Some(mapped)
}

/// # Safety
/// `ev` must be an event just returned by `ibv_get_async_event`, not yet acknowledged.
unsafe fn map_event(kind: u32, ev: *const ffi::ibv_async_event) -> Option<AsyncEvent> {
    use ffi::ibv_event_type as T;
    // SAFETY: `ev` points at an initialised event (caller); the union reads below each
    // name the member the event kind says is set.
    let element = unsafe { &(*ev).element };
    let qp_num = || {
        // SAFETY: QP events carry a QP that stays alive until the ack.
        unsafe { (*element.qp).qp_num }
    };
    Some(match kind {
        k if k == T::IBV_EVENT_CQ_ERR as u32 => {
            // SAFETY: CQ events set the `cq` member.
            AsyncEvent::CqErr(ObjectId(unsafe { element.cq } as u64))
        }
        k if k == T::IBV_EVENT_QP_FATAL as u32
            || k == T::IBV_EVENT_QP_REQ_ERR as u32
            || k == T::IBV_EVENT_QP_ACCESS_ERR as u32 =>
        {
            AsyncEvent::QpFatal(qp_num())
        }
        k if k == T::IBV_EVENT_COMM_EST as u32 => AsyncEvent::CommEstablished(qp_num()),
        k if k == T::IBV_EVENT_QP_LAST_WQE_REACHED as u32 => AsyncEvent::QpLastWqeReached(qp_num()),
        k if k == T::IBV_EVENT_SRQ_LIMIT_REACHED as u32 => {
            // SAFETY: SRQ events set the `srq` member.
            AsyncEvent::SrqLimitReached(ObjectId(unsafe { element.srq } as u64))
        }
        k if k == T::IBV_EVENT_PORT_ACTIVE as u32 => AsyncEvent::PortActive,
        k if k == T::IBV_EVENT_PORT_ERR as u32 => AsyncEvent::PortErr,
        k if k == T::IBV_EVENT_DEVICE_FATAL as u32 => AsyncEvent::DeviceFatal,
        _ => return None,
    })
}
