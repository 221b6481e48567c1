//! The capability bit set both sides offer at the handshake.

use std::fmt;

/// Optional protocol features: a client offers those it implements, the server
/// grants the ones both implement, and each side uses only granted ones.
///
/// Defined: [`Capabilities::CREDIT_WINDOWS`]. Later work adds streaming calls, rendezvous by RDMA Read, same-host shared-memory links and a
/// no-immediate mode (iWARP), each as one bit here. Bits this build does not know
/// are kept when decoded (a peer may be newer) and drop out of every grant.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Capabilities(u64);

impl Capabilities {
    /// No feature.
    pub const NONE: Capabilities = Capabilities(0);
    /// RC credit windows that the server moves on its answers (see
    /// [`crate::engine::wire`], "Windows granted out of the shared pool"): the
    /// handshake grants the minimal window, 2, instead of a fixed share.
    pub const CREDIT_WINDOWS: Capabilities = Capabilities(1 << 4);
    /// Bodies by reference (RDMA Read rendezvous, see [`crate::engine::wire`],
    /// "Large messages by reference"): the side reads bodies its peer lends, and
    /// its QP accepts the peer's Reads of the regions it lends.
    pub const RDMA_READ: Capabilities = Capabilities(1 << 5);
    /// With [`Capabilities::RDMA_READ`]: the side reads bodies sent as gather lists
    /// (inline runs and references, [`crate::engine::gather`]), so its peer may lend
    /// bytes where they lie instead of copying them into one region.
    pub const GATHER_LISTS: Capabilities = Capabilities(1 << 6);
    /// With [`Capabilities::RDMA_READ`]: the server reads requests sent as gather
    /// lists, so a client may lend a request's large `Bytes` where they lie.
    pub const GATHER_REQUESTS: Capabilities = Capabilities(1 << 7);
    /// What this build implements.
    pub const SUPPORTED: Capabilities = Capabilities(
        Capabilities::CREDIT_WINDOWS.0
            | Capabilities::RDMA_READ.0
            | Capabilities::GATHER_LISTS.0
            | Capabilities::GATHER_REQUESTS.0,
    );

    /// The set with these bits, known or not.
    pub const fn from_bits(bits: u64) -> Capabilities {
        Capabilities(bits)
    }

    /// The bits.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// The features in both sets.
    pub const fn common(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 & other.0)
    }

    /// Whether every feature of `other` is in this set.
    pub const fn contains(self, other: Capabilities) -> bool {
        other.0 & !self.0 == 0
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Capabilities({:#x})", self.0)
    }
}
