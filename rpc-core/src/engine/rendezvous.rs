//! Bodies by reference (RDMA Read "rendezvous"): what the engines ask their drivers
//! to read. The frames are [`wire`](super::wire)'s ("Large messages by reference");
//! the memory is the driver's (a bounded pool of registered regions).

use crate::engine::wire::Descriptor;

/// A body the driver is to pull with RDMA Read (in pieces of at most the device's
/// max message) into a region of its own, then report to the engine that asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOp {
    /// The call.
    pub id: u32,
    /// Where the body lies at the peer.
    pub desc: Descriptor,
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
