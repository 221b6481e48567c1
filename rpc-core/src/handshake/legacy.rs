//! Peers of protocol version 1, which sent a fixed 50-byte hello straight on the TCP
//! connection (`"RRPC"`, version, flags, QP endpoint, slot size, credits, largest
//! message) instead of the queue-pair exchange's envelope.

use std::fmt;
use std::io;

use rpc_transport::msg::handshake::Stranger;

use super::{MAGIC, VERSION};

/// Length of a version-1 hello, which such a peer reads whole before checking it.
const V1_HELLO_LEN: usize = 50;
/// Version-1 flag: refused.
const V1_REJECTED: u16 = 1;

/// An rdma-rpc peer of an older protocol version, recognised from the first bytes
/// the exchange refused as a stranger's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OldPeer {
    version: u16,
}

impl OldPeer {
    /// The old peer whose hello failed the exchange with `e`, if it is one.
    pub fn recognize(e: &io::Error) -> Option<OldPeer> {
        let head = Stranger::of(e)?.head();
        if head.get(..4)? != MAGIC {
            return None;
        }
        let version = u16::from_be_bytes(head.get(4..6)?.try_into().ok()?);
        Some(OldPeer { version })
    }

    /// Its protocol version.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// A refusal in the old format: a version-1 client reads it as "peer speaks
    /// protocol version 2, this side 1".
    pub fn refusal(&self) -> Vec<u8> {
        let mut b = vec![0u8; V1_HELLO_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_be_bytes());
        b[6..8].copy_from_slice(&V1_REJECTED.to_be_bytes());
        b
    }
}

/// The server's view, for its logs.
impl fmt::Display for OldPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "peer speaks rdma-rpc protocol version {}, this side {VERSION}",
            self.version
        )
    }
}
