//! Received message bytes, wherever they live.

/// The bytes of one received message. In the transport they are borrowed from a
/// registered receive slot (released back to the receive queue when this drops) or,
/// for a message reassembled from fragments, owned.
pub struct Payload {
    repr: Repr,
}

enum Repr {
    Owned(Vec<u8>),
}

impl Payload {
    /// Owned bytes (tests, reassembled messages).
    pub fn from_vec(v: Vec<u8>) -> Payload {
        Payload {
            repr: Repr::Owned(v),
        }
    }

    /// The message bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.repr {
            Repr::Owned(v) => v,
        }
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.as_slice().len())
    }
}
