//! The message layer: registered slot rings with a safe API over the unsafe posts,
//! and the connection handshake.
//!
//! * [`SendRing`]: one memory region cut into slots; a slot's bytes are writable only
//!   while it is not in flight, and it returns to the ring when the completion that
//!   covers it is reaped (selective signaling: one signaled WR frees every earlier
//!   slot, since a send queue completes in order).
//! * [`RecvPool`]: one memory region cut into slots, posted to an SRQ (shared by
//!   every connection of a server) or a QP's receive queue. A reaped receive becomes
//!   a [`RecvSlot`] that exposes the received bytes and reposts its buffer when
//!   dropped; reposts made inside a [`RecvPool::batch`] go out as one post list.
//! * [`UdSendRing`]: send slots of a UD QP that stay with their owner while posted,
//!   so a retransmission reposts the same bytes; a slot is reused only once its
//!   owner released it and every send of it completed.
//! * [`ImmMode`]: where each frame's 32-bit immediate travels, in the verbs
//!   immediate or (on devices without immediate data, such as iWARP) as a 4-byte
//!   header at the head of the payload; rings and pools take it at construction
//!   (`with_mode`) and [`RecvSlot::imm`] gives the value in both modes.
//! * [`RegionPool`]: bounded, reused registered regions for messages that travel
//!   by reference (RDMA Read); a request that finds no room waits its turn.
//! * [`Reader`]: a QP's RDMA Reads of messages the peer lent, into pool regions,
//!   in pieces within the device's max message, handed out as shared `Bytes`.
//! * [`OneRead`]: one RDMA Read into a region of its own, for raw peers in tools
//!   and tests; its region is never freed before the Read completed.
//! * [`GatherWriter`]: a message encoded as a gather list, referencing the bytes it
//!   holds that lie in a region a pool shared as `Bytes` instead of copying them.
//! * [`handshake`]: the exchange of QP endpoints (each with an opaque payload for the
//!   layer above) over an out-of-band TCP connection that stays open as the liveness
//!   channel.

mod gather_writer;
pub mod handshake;
#[cfg(test)]
mod header_tests;
mod imm_mode;
#[cfg(test)]
mod lent_bytes_tests;
mod one_read;
mod reader;
#[cfg(test)]
mod reader_tests;
mod reads_in_flight;
mod recv_pool;
mod region_pool;
mod send_ring;
#[cfg(test)]
mod tests;
mod ud_ring;

pub use gather_writer::{
    BytesLender, GatherPart, GatherWriter, Gathered, Keep, Lender, MAX_INLINE_BYTES, MIN_REF_BYTES,
};
pub use handshake::Envelope;
pub use imm_mode::{ImmMode, IMM_HEADER_LEN};
pub use one_read::OneRead;
pub use reader::{Piece, ReadError, Reader};
pub use reads_in_flight::reads_in_flight;
pub use recv_pool::{OnRepost, RecvBatch, RecvPool, RecvSlot, RecvTarget};
pub use region_pool::{
    PoolStats, PooledRegion, RegionPool, SharedRegion, Ticket, WeakRegionPool, GRAIN,
};
pub use send_ring::{SendRing, SendSlot};
pub use ud_ring::{UdDestination, UdSendRing, UdSlot};

use crate::device::Device;
use crate::error::Result;

/// Opens the device named `name`, or with `None` the default one
/// ([`Device::open_default`]: verbs when built and present, else soft), and logs
/// which provider was chosen.
pub fn open_device(name: Option<&str>) -> Result<Device> {
    match name {
        None => Device::open_default(),
        Some(n) => {
            let dev = Device::open(n)?;
            tracing::info!(provider = %dev.provider(), device = dev.name(), "opened RDMA device");
            Ok(dev)
        }
    }
}
