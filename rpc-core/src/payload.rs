//! Received message bytes, wherever they live.

use crate::slot_buf::SlotBuf;

/// The bytes of one received message. In the transport they are borrowed from a
/// registered receive slot (released back to the receive queue when this drops) or,
/// for a message reassembled from fragments, owned.
pub struct Payload {
    repr: Repr,
}

enum Repr {
    Owned(Vec<u8>),
    /// Borrowed from a registered receive slot; the slot is reposted when this drops.
    Slot {
        slot: rpc_transport::msg::RecvSlot,
        range: std::ops::Range<usize>,
    },
    /// Shared: with a pooled registered region (a body read by reference; the region
    /// returns to its pool when the last clone drops), or with the other messages of
    /// a stream's batch frame (copied out of its slot once).
    Shared(bytes::Bytes),
}

impl Payload {
    /// Owned bytes (tests, reassembled messages).
    pub fn from_vec(v: Vec<u8>) -> Payload {
        Payload {
            repr: Repr::Owned(v),
        }
    }

    /// Bytes shared with their buffer (a body read by reference into a pooled region,
    /// or a slice of a buffer several stream messages came in).
    pub(crate) fn from_bytes(b: bytes::Bytes) -> Payload {
        Payload {
            repr: Repr::Shared(b),
        }
    }

    /// Bytes `range` of a received slot, read in place (no copy).
    ///
    /// # Panics
    /// If `range` is outside the received bytes.
    pub(crate) fn from_slot(
        slot: rpc_transport::msg::RecvSlot,
        range: std::ops::Range<usize>,
    ) -> Payload {
        assert!(range.start <= range.end && range.end <= slot.len());
        Payload {
            repr: Repr::Slot { slot, range },
        }
    }

    /// Decodes bytes `range` of the payload (the whole message: `0..len`). Owned bytes
    /// are handed to prost as `Bytes`, so a `bytes` field of a reassembled (large)
    /// message shares the buffer instead of copying megabytes out of it.
    ///
    /// # Panics
    /// If `range` is outside the payload.
    pub(crate) fn decode<M: prost::Message + Default>(
        self,
        range: std::ops::Range<usize>,
    ) -> Result<M, prost::DecodeError> {
        match self.repr {
            Repr::Owned(v) => M::decode(bytes::Bytes::from(v).slice(range)),
            // The whole of it moves in: `slice` would clone it (a reference count
            // up and down per stream message) for nothing.
            Repr::Shared(b) if range == (0..b.len()) => M::decode(b),
            Repr::Shared(b) => M::decode(b.slice(range)),
            Repr::Slot { slot, range: r } => M::decode(SlotBuf(&slot.bytes()[r][range])),
        }
    }

    /// The message bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.repr {
            Repr::Owned(v) => v,
            Repr::Shared(b) => b,
            Repr::Slot { slot, range } => &slot.bytes()[range.clone()],
        }
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.as_slice().len())
    }
}
