//! The verbs provider: libibverbs (rdma-core) through the `rdma-sys` crate, behind the
//! cargo feature `rdma`. It runs on real NICs and on the kernel's SoftRoCE (`rdma_rxe`).
//!
//! Each provider type owns one ibverbs object and destroys it on `Drop`; each keeps its
//! parents alive through an `Arc` (MR → PD → device, QP → PD/CQs/SRQ, CQ → device), so
//! no object can be destroyed while a child still names it. Every FFI call sits in an
//! `unsafe` block whose `// SAFETY:` line says which of these ownership facts makes it
//! sound. libibverbs objects are thread-safe (providers lock internally), which is
//! why the types are `Send + Sync`.
//!
//! # Connection setup: out-of-band TCP, not rdma_cm
//! `rdma://host:port` connects by exchanging a [`crate::QpEndpoint`] (LID, QPN, PSN,
//! GID) over a TCP connection in the message layer, then each side moves its RC QP
//! through RESET → INIT → RTR → RTS itself ([`crate::QueuePair::connect_rc`]). We chose
//! that over rdma_cm because (1) the soft provider has no rdma_cm, and one handshake
//! shared by both providers is one protocol to version and test; (2) rxe's rdma_cm does
//! not resolve routes on loopback addresses (`rdma_resolve_route: No such device`), so
//! same-host tests would need a dedicated non-loopback interface; (3) it is the
//! exchange ibv_rc_pingpong and perftest use, which lets us interoperate with them
//! (`examples/rc_pingpong_compat.rs`). What we give up is rdma_cm's IB path-record
//! resolution: on InfiniBand fabrics (not RoCE) the LID route is taken as given.
//!
//! iWARP is the exception: its QPs can only be connected by the connection manager,
//! so there the endpoints name an rdma_cm listener and `connect_rc`/`accept_rc` go
//! through librdmacm (module `cm`).

mod ah;
mod caps;
mod cm;
mod cq;
mod device;
mod error;
mod event;
mod mr;
mod mw;
mod pd;
mod post;
mod qp;
mod srq;
#[cfg(test)]
mod tests;
mod wc;

pub(crate) use ah::Ah;
pub(crate) use cq::Cq;
pub(crate) use device::Device;
pub(crate) use mr::Mr;
pub(crate) use mw::Mw;
pub(crate) use pd::Pd;
pub(crate) use qp::Qp;
pub(crate) use srq::Srq;

/// The libibverbs bindings, under one short name.
use rdma_sys as ffi;
