//! Connecting RC queue pairs through the RDMA connection manager (librdmacm), for
//! devices that cannot be connected by hand: iWARP (`siw`, and iWARP RNICs).
//!
//! # Why
//! An iWARP QP runs over a TCP connection that the kernel's connection manager (iw_cm)
//! creates and hands to the driver; `siw` refuses RTS to a QP that `ibv_modify_qp`
//! drives by hand ("no socket"). So on iWARP the out-of-band exchange of
//! [`crate::QpEndpoint`]s still happens (rdma-rpc's TCP handshake carries version,
//! capabilities and credits), but the endpoints name where to reach the QP through
//! rdma_cm instead of a LID/GID path: `gid` is the IPv4-mapped address of the device's
//! netdev and `lid` the port of the device's rdma_cm listener (iWARP has no LIDs).
//!
//! # How
//! The QP is the one `ibv_create_qp` made, not one of `rdma_create_qp`: the kernel's
//! iw_cm finds a QP by number (`conn_param.qp_num`, `iw_get_qp`) when a cm_id has none
//! of its own, and librdmacm then leaves the QP's transitions to the caller, which on
//! iWARP means to the driver. The QP is moved to INIT by the caller as usual.
//! * Passive side ([`Listener`], one per device, started by the first endpoint the
//!   device publishes): `rdma_listen` on the device's address, a thread that takes
//!   connect requests and accepts one with the registered QP that its private data
//!   names (`QueuePair::accept_rc`), rejecting any other.
//! * Active side ([`connect`]): `rdma_resolve_addr`/`rdma_resolve_route`/`rdma_connect`
//!   on a synchronous cm_id; it returns once the connection is established.
//!
//! The cm_id lives as long as the QP (destroying it tears the connection down), and is
//! destroyed before the QP.
//!
//! # The active side sends first
//! In MPA (RFC 5044) the passive side must not send before the first message of the
//! initiator has arrived. The side that calls `connect_rc` is the initiator: rdma-rpc's
//! client, whose first frame (a request or WANT) always precedes anything the server
//! sends on the QP, so the rule holds without a message of its own.

mod active;
mod addr;
mod id;
mod listener;

pub(crate) use active::connect;
pub(crate) use addr::device_ipv4;
pub(crate) use id::{endpoint_addr, CmId, Private};
pub(crate) use listener::Listener;
