//! Bodies by reference (RDMA Read "rendezvous"): what the engines ask their drivers
//! to read. The frames are [`wire`](super::wire)'s ("Large messages by reference");
//! the memory is the driver's (a bounded pool of registered regions).

use crate::engine::gather::Gather;
use crate::engine::wire::Descriptor;

/// Bit of a [`ReadOp::id`] that marks the read of a stream message: the id is then
/// a tag the engine chose (a call has several such reads at once), not a call id
/// (28 bits, so never with this bit).
pub const STREAM_READ_TAG: u32 = 1 << 31;

/// A body the driver is to pull with RDMA Read (in pieces of at most the device's
/// max message) into a region of its own, then report to the engine that asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOp {
    /// The call, or a stream message's read tag (with [`STREAM_READ_TAG`]); the
    /// driver reports the read under it.
    pub id: u32,
    /// Where the body lies at the peer (for a gather list: its first reference,
    /// with the whole body's length).
    pub desc: Descriptor,
    /// The body's parts, when it is a gather list (a response that lends bytes where
    /// they lie at the peer): the driver places each at its offset in one region.
    pub gather: Option<Gather>,
    /// Bytes of the frame before the body (a request's head, path and metadata) that
    /// the driver copies to the region's head, so that head and body share one
    /// buffer; 0 for a response.
    pub head_len: usize,
}

impl ReadOp {
    /// Bytes of region the read needs.
    pub fn region_len(&self) -> usize {
        self.head_len + self.desc.len as usize
    }
}
