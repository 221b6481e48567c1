//! The active side: connect an existing QP to a peer's listener.

use std::net::SocketAddrV4;
use std::ptr;

use super::super::error::{check, last_error};
use super::super::ffi;
use super::id::{sockaddr_in, CmId, Private, MAX_RD_ATOMIC};
use crate::error::{Error, Result};

/// How long address and route resolution may take.
const RESOLVE_TIMEOUT_MS: i32 = 5000;

/// Connects QP `qp_num` to the QP `private.to` behind the listener at `dst`, and
/// returns once the connection is established (the driver moved the QP to RTS). The
/// returned id must outlive the connection.
pub(crate) fn connect(qp_num: u32, dst: SocketAddrV4, private: Private) -> Result<CmId> {
    let mut raw = ptr::null_mut();
    // SAFETY: a null channel makes the id synchronous (each call below waits for its
    // event); `raw` is a valid out-pointer.
    check("rdma_create_id", unsafe {
        ffi::rdma_create_id(
            ptr::null_mut(),
            &mut raw,
            ptr::null_mut(),
            ffi::rdma_port_space::RDMA_PS_TCP,
        )
    })?;
    let id = CmId::own(raw).ok_or_else(|| last_error("rdma_create_id"))?;
    let mut sa = sockaddr_in(dst);
    // SAFETY: live id; `sa` is a sockaddr_in that the call only reads.
    check("rdma_resolve_addr", unsafe {
        ffi::rdma_resolve_addr(
            id.raw(),
            ptr::null_mut(),
            (&mut sa as *mut libc::sockaddr_in).cast(),
            RESOLVE_TIMEOUT_MS,
        )
    })?;
    // SAFETY: live id with a resolved address.
    check("rdma_resolve_route", unsafe {
        ffi::rdma_resolve_route(id.raw(), RESOLVE_TIMEOUT_MS)
    })?;
    let data = private.to_bytes();
    let mut param = ffi::rdma_conn_param {
        private_data: data.as_ptr().cast(),
        private_data_len: Private::LEN as u8,
        responder_resources: MAX_RD_ATOMIC,
        initiator_depth: MAX_RD_ATOMIC,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num,
    };
    // SAFETY: live id with a resolved route; `param` and the private data it points at
    // live across the call, which copies them. Synchronous: returns after the event,
    // with ECONNREFUSED when the listener rejected us.
    let ret = unsafe { ffi::rdma_connect(id.raw(), &mut param) };
    if ret != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::Verb {
            verb: "rdma_connect",
            source: std::io::Error::new(
                e.kind(),
                format!("connecting QP {qp_num} to QP {} at {dst}: {e}", private.to),
            ),
        });
    }
    // SAFETY: a synchronous id keeps the last event in `event` until the next call.
    let ev = unsafe { (*id.raw()).event };
    // SAFETY: non-null events are live until acknowledged (by the id's next call or
    // its destruction).
    let kind = (!ev.is_null()).then(|| unsafe { (*ev).event });
    if kind != Some(ffi::rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED) {
        return Err(Error::InvalidArgument(format!(
            "rdma_connect to {dst} ended with event {kind:?}, not ESTABLISHED"
        )));
    }
    Ok(id)
}
