//! Provider-neutral RDMA verbs for rdma-rpc, with two providers underneath.
//!
//! The object model follows libibverbs: a [`Device`] (opened context) allocates
//! [`ProtectionDomain`]s and [`CompletionQueue`]s; a PD registers
//! [`MemoryRegion`]s and creates [`QueuePair`]s (RC or UD), [`SharedReceiveQueue`]s
//! and [`AddressHandle`]s, and allocates type-2 [`MemoryWindow`]s ([`mw`]) where the
//! device has them ([`DeviceCaps::mw_type2`]). Work requests ([`SendWr`], [`RecvWr`]) name memory by
//! [`Sge`]s, complete as [`WorkCompletion`]s with ibverbs' [`WcStatus`] values, and
//! QPs move through ibverbs' state machine ([`QpState`]) with the same required
//! attributes per transition.
//!
//! # Providers
//! * `soft` (always built, the default): a userspace RDMA device. RC QPs run over TCP,
//!   UD QPs over UDP; keys, bounds, access rights, RNR, flushes and CQ overrun are
//!   enforced as hardware does. Progress happens inside `poll` and `post` calls, with
//!   one helper thread per device only for what must happen while nobody polls.
//! * `verbs` (feature `rdma`): libibverbs over a real NIC or the kernel's rxe.
//!
//! # Features
//! * `rdma`: build the verbs provider (needs libibverbs-dev, librdmacm-dev,
//!   libclang-dev and pkg-config).
//!
//! # Safety model
//! Posting is `unsafe`: the caller promises that memory named by a WR stays owned and
//! untouched until its completion is polled. The message layer built on top owns its
//! buffers until completion, which keeps its own API safe.

mod access;
mod addr;
mod ah;
mod caps;
mod cq;
mod device;
mod dispatch;
mod error;
mod event;
mod fd_limit;
mod heap;
mod mr;
mod mr_buffer;
pub mod msg;
pub mod mw;
mod pd;
mod qp;
mod qp_state;
mod soft;
mod srq;
#[cfg(feature = "rdma")]
mod verbs;
mod wc;
mod wr;

pub use access::AccessFlags;
pub use addr::{Gid, QpEndpoint};
pub use ah::{AddressHandle, AhAttr, GlobalRoute};
pub use caps::{DeviceCaps, Fabric};
pub use cq::CompletionQueue;
pub use device::{Device, DeviceAttr, DeviceInfo, PortAttr, ProviderKind, DEVICE_ENV};
pub use error::{Error, PostError, Result};
pub use event::{AsyncEvent, ObjectId};
pub use heap::release_free_heap;
pub use mr::{MemoryRegion, RemoteMr};
pub use mw::{inc_rkey, MemoryWindow, MwBind};
pub use pd::{LentBytes, ProtectionDomain};
pub use qp::{QpCap, QpInitAttr, QueuePair, RcRetry};
pub use qp_state::{
    ack_timeout_us, rnr_timer_us, transition_allowed, Mtu, QpAttr, QpState, QpType,
};
pub use soft::{
    copied_for_peers, SoftConfig, SoftLink, SoftProfile, SoftStats, UdFaults, SOFT_LINK_ENV,
    SOFT_PROFILE_ENV,
};
pub use srq::{SharedReceiveQueue, SrqInitAttr};
pub use wc::{WcOpcode, WcStatus, WorkCompletion};
pub use wr::{MwBindOp, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest};

/// The soft provider's wire decoders and shared-memory ring, for the fuzz targets
/// `fuzz/fuzz_targets/soft_wire.rs` and `shm_ring.rs`.
/// Not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::soft::shm::ring::fuzz_ring as shm_ring;
    pub use crate::soft::wire::fuzz_one as soft_wire;
}

/// Bytes at the head of every UD receive buffer reserved for the Global Routing Header.
pub const GRH_LEN: usize = 40;
