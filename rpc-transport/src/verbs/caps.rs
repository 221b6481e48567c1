//! Detecting a verbs device's capabilities when it opens.
//!
//! The fabric comes from the device's transport type (`IBV_TRANSPORT_IWARP` for
//! iWARP RNICs such as `siw`) and port 1's link layer (Ethernet: RoCE, else
//! InfiniBand); limits from `ibv_query_device` and `ibv_query_port`. Two things
//! no query reports are probed with throwaway objects: whether a UD QP can be
//! created, and the largest inline payload an RC QP is granted. Immediate data has
//! neither a query nor a probe that works without a connected peer (drivers check
//! the QP state before the opcode), so it follows the fabric: iWARP has none
//! (RFC 5040; `siw_post_send` refuses it), InfiniBand and RoCE always have it.

use std::mem::MaybeUninit;
use std::sync::Arc;

use super::error::check;
use super::ffi;
use super::{Cq, Device, Pd, Qp};
use crate::caps::{DeviceCaps, Fabric};
use crate::error::{Error, PostError, Result};
use crate::qp::QpCap;
use crate::qp_state::QpType;
use crate::wr::{SendOp, SendWr};

/// `IBV_LINK_LAYER_ETHERNET` (a `#define` in verbs.h, which the bindings omit).
const LINK_LAYER_ETHERNET: u8 = 2;

/// Inline sizes tried, largest first, when probing an RC QP; between the largest
/// granted and the next refused one, a bisection finds the exact limit.
const INLINE_PROBES: [u32; 6] = [1024, 512, 256, 128, 64, 0];

/// What `dev` offers. Probing needs a PD and a CQ; if even those cannot be made,
/// the probed fields say "no" and "0", which promises nothing the device lacks.
pub(super) fn detect(dev: &Arc<Device>) -> Result<DeviceCaps> {
    let (transport, node) = {
        // SAFETY: the context is live (held by `dev`) and its `device` pointer is set
        // by ibv_open_device and never changes.
        let d = unsafe { &*(*dev.ctx()).device };
        (d.transport_type, d.node_type)
    };
    let iwarp = transport == ffi::ibv_transport_type::IBV_TRANSPORT_IWARP
        || node == ffi::ibv_node_type::IBV_NODE_RNIC;
    let mut port = MaybeUninit::<ffi::ibv_port_attr>::zeroed();
    // SAFETY: live context; `port` is a writable ibv_port_attr.
    check("ibv_query_port", unsafe {
        ffi::___ibv_query_port(dev.ctx(), 1, port.as_mut_ptr())
    })?;
    // SAFETY: zero-initialised plain data, filled in by the verb.
    let port = unsafe { port.assume_init() };
    let fabric = if iwarp {
        Fabric::Iwarp
    } else if port.link_layer == LINK_LAYER_ETHERNET {
        Fabric::Roce
    } else {
        Fabric::InfiniBand
    };
    let attr = dev.attr();
    let (ud, max_inline) = probe(dev, attr.max_sge.min(1), !iwarp);
    Ok(DeviceCaps {
        fabric,
        imm_data: !iwarp,
        ud,
        atomics: attr.atomics,
        srq: attr.max_srq > 0,
        mw_type2: attr.mw_type2,
        max_inline,
        max_sge: attr.max_sge,
        max_msg_size: (port.max_msg_sz > 0).then_some(port.max_msg_sz),
    })
}

/// (UD QP creatable, largest inline payload of an RC QP).
fn probe(dev: &Arc<Device>, sge: u32, try_ud: bool) -> (bool, u32) {
    let objects = Pd::alloc(dev).and_then(|pd| Ok((pd, Cq::create(dev, 4)?)));
    let (pd, cq) = match objects {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(device = dev.name(), error = %e, "cannot probe device capabilities");
            return (false, 0);
        }
    };
    let create = |t: QpType, inline: u32| -> Result<Arc<Qp>> {
        let cap = QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: sge,
            max_recv_sge: sge,
            max_inline_data: inline,
        };
        Qp::create(&pd, t, &cq, &cq, None, &cap, false)
    };
    let ud = try_ud
        && match create(QpType::Ud, 0) {
            Ok(_) => true,
            Err(e) => {
                log_refusal(dev, "UD QP", &e);
                false
            }
        };
    let granted = |n: u32| {
        create(QpType::Rc, n)
            .ok()
            .map(|qp| qp.cap().max_inline_data)
    };
    let Some(i) = INLINE_PROBES.iter().position(|&n| granted(n).is_some()) else {
        return (ud, 0);
    };
    // Largest size known to be granted, and smallest known to be refused.
    let (mut ok, mut refused) = (INLINE_PROBES[i], i.checked_sub(1).map(|j| INLINE_PROBES[j]));
    if let Some(mut bad) = refused {
        while bad - ok > 1 {
            let mid = ok + (bad - ok) / 2;
            if granted(mid).is_some() {
                ok = mid;
            } else {
                bad = mid;
            }
        }
        refused = Some(bad);
    }
    // A device may grant more than asked (rxe rounds up to its WQE size).
    let inline = granted(ok).unwrap_or(ok).max(ok);
    tracing::debug!(
        device = dev.name(),
        inline,
        ?refused,
        "probed max inline data"
    );
    (ud, inline)
}

fn log_refusal(dev: &Device, what: &str, e: &Error) {
    tracing::debug!(device = dev.name(), error = %e, "device refuses a {what}");
}

/// Names an `EINVAL` refusal of an opcode the device lacks (libsiw refuses Send and
/// Write with Immediate and atomics that way, in `push_send_wqe`) as
/// [`PostError::Unsupported`], as the soft provider reports it. Only the error path
/// looks at the capabilities.
pub(super) fn name_unsupported(dev: &Device, wrs: &[SendWr<'_>], r: Result<()>) -> Result<()> {
    match r {
        Err(Error::Post {
            index,
            reason: PostError::Os(libc::EINVAL),
        }) if wrs
            .get(index)
            .is_some_and(|wr| lacks(&dev.caps(), &wr.opcode)) =>
        {
            Err(Error::Post {
                index,
                reason: PostError::Unsupported,
            })
        }
        r => r,
    }
}

fn lacks(caps: &DeviceCaps, op: &SendOp) -> bool {
    match op {
        SendOp::SendWithImm { .. } | SendOp::RdmaWriteWithImm { .. } => !caps.imm_data,
        SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. } => !caps.atomics,
        SendOp::BindMw(_) | SendOp::LocalInv { .. } => !caps.mw_type2,
        _ => false,
    }
}
