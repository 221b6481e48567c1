//! Connection negotiation, with no I/O: what a client asks for, what a server grants
//! or why it refuses, and the client's check of the answer.
//!
//! The bytes travel as the payload of `rpc_transport::msg::handshake`'s queue-pair
//! exchange (which carries each side's QP endpoint and keeps the TCP connection open
//! as the liveness channel); this module only reads and writes them:
//!
//! * [`ClientHello`] (client → server): protocol [`VERSION`], the [`Capabilities`]
//!   the client offers, and what it asks for: an RC connection ([`RcAsk`]: credits,
//!   slot size, largest message) or a UD session ([`UdAsk`]: window, largest datagram
//!   it receives, largest message, its Q_Key).
//! * [`decide`] (server): the hello bytes, the server's [`Policy`] and its current
//!   [`Availability`] → a [`Decision`]: what is granted ([`RcGrant`], [`UdGrant`]) or
//!   a [`Reject`] reason. The caller keeps its own accounting (the receive pool's
//!   granted credits, the UD engine's sessions) and fills in the UD session id.
//! * [`Answer`] (server → client): a grant or a refusal, encoded by
//!   [`RcGrant::encode`], [`UdGrant::encode`] or [`Reject::encode`].
//! * [`check_rc`], [`check_ud`] (client): its hello and the answer bytes → the
//!   negotiated parameters, or a [`HandshakeError`] that says why in words a user
//!   can act on.
//! * [`OldPeer`]: recognises a version-1 peer (which sent its hello without the
//!   exchange's framing) and answers it in its own format, so it too learns why.
//!
//! # Wire layout
//!
//! Big endian. Every message starts with the same 8 bytes, in every version:
//! ```text
//! 0 magic "RRPC"  4 version:u16  6 kind:u8 (0 hello, 1 grant, 2 refusal)
//! 7 transport:u8 (1 = RC, 2 = UD; 0 in a refusal)
//! ```
//! Client hello:
//! ```text
//! 8 capabilities:u64
//! RC: 16 credits:u32  20 slot_size:u32  24 max_message:u64                  (32 bytes)
//! UD: 16 window:u32   20 datagram:u32   24 max_message:u64  32 qkey:u32     (36 bytes)
//! then, optional: device:u64 (the client device's `DeviceCaps::to_bits`)  (+8 bytes)
//! ```
//! Server answer:
//! ```text
//! grant    8 capabilities:u64 (the common ones)
//!   RC: 16 credits:u32  20 slot_size:u32  24 max_message:u64                (32 bytes)
//!   UD: 16 window:u32   20 datagram:u32   24 max_message:u64  32 qkey:u32
//!       36 session:u32  40 flags:u32 (bit 0: the server accepts RC too)     (44 bytes)
//!   then, optional: device:u64 (the server device's `DeviceCaps::to_bits`)  (+8 bytes)
//! refusal  8 reason:u16  10 detail:u32                                      (14 bytes)
//! ```
//! * `credits`: frames the client may have unanswered (receives the server reserves
//!   for it from its shared pool). `slot_size`: the frame size both sides use; the
//!   client says what it would like, the server's wins. `max_message`: the largest
//!   message body the sender accepts; each side sends at most the other's.
//! * UD: `window` calls outstanding, `datagram` the largest UD payload (the smaller
//!   of both sides'), `session` assigned by the server (never 0), `qkey` the
//!   sender's Q_Key.
//! * A refusal's layout never changes, and its `version` is the server's: a client
//!   of any version can read why it was refused (`detail`: the client's version for
//!   [`Reject::UnsupportedVersion`], the limit for [`Reject::SessionLimit`]).
//! * `device`: each side's device capabilities ([`device`]: a side without immediate
//!   data makes the connection frame its immediates in the payload's head). Sent by
//!   every peer of this build; an older one (none sent) is taken to have immediates
//!   and UD.
//! * Decoders ignore bytes past the fields they know: a later capability appends its
//!   fields, sent only when both sides offered it, without a version bump.
//!
//! # Versions
//!
//! Version 2 is this one (version 1 had no capabilities and sent its hello without
//! the exchange's framing; its call wire differs too). A server refuses any other
//! version with [`Reject::UnsupportedVersion`], naming both; a server that speaks
//! several would answer in the client's.
//!
//! # What comes next (none of it built)
//!
//! * **Capabilities.** The bit set exists so that features arrive without a version
//!   bump: a client offers what it implements, the grant holds what both do, and
//!   each side uses only granted features. Planned: streaming calls (two
//!   half-streams with per-stream credits), rendezvous for large bodies by RDMA Read,
//!   same-host links over shared memory, and a no-immediate mode for iWARP (where
//!   Send-with-Immediate is missing). None is defined yet: every bit is unknown and
//!   dropped from the grant.
//! * **After the exchange** the TCP connection carries the server's one-byte notices
//!   ([`liveness`]: GOAWAY) and its closing means the peer is gone. The server's
//!   driver bounds how long a peer may take to send its hello (the negotiation
//!   itself has no clock and stays so).
//! * **Reconnection.** A channel that loses its connection will dial again and redo
//!   this exchange from a fresh [`ClientHello`]; nothing here keeps state between
//!   two handshakes.

mod answer;
mod capabilities;
mod check;
mod decide;
pub mod device;
#[cfg(test)]
mod device_tests;
mod hello;
mod legacy;
pub mod liveness;
mod reject;
mod soft_peer;
#[cfg(test)]
mod tests;

pub use answer::{Answer, RcGrant, UdGrant};
pub use capabilities::Capabilities;
pub use check::{check_rc, check_ud, HandshakeError};
pub use decide::{asks_ud, decide, Availability, Decision, Policy, RcPolicy, UdPolicy};
pub use hello::{Ask, ClientHello, RcAsk, UdAsk};
pub use legacy::OldPeer;
pub use reject::Reject;
pub use soft_peer::check_soft_peer;

/// Magic at the head of every negotiation message.
pub const MAGIC: [u8; 4] = *b"RRPC";
/// This protocol version; a peer with another is refused.
pub const VERSION: u16 = 2;

/// What an error says when a device cannot do UD: a UD channel that meets it
/// (from its own device or in the server's refusal) connects over RC instead.
pub const NO_UD: &str = "device has no UD (RC only)";

/// The transport a hello asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A reliable connection: one RC queue pair each side, credits.
    Rc,
    /// A UD session: datagrams, retransmission by the client.
    Ud,
}

impl Transport {
    fn code(self) -> u8 {
        match self {
            Transport::Rc => 1,
            Transport::Ud => 2,
        }
    }

    fn from_code(c: u8) -> Option<Transport> {
        match c {
            1 => Some(Transport::Rc),
            2 => Some(Transport::Ud),
            _ => None,
        }
    }
}

/// `kind` of a client hello.
const KIND_HELLO: u8 = 0;
/// `kind` of an answer that grants.
const KIND_GRANT: u8 = 1;
/// `kind` of an answer that refuses.
const KIND_REFUSAL: u8 = 2;

/// The 8 bytes every message starts with.
fn head(kind: u8, transport: u8) -> Vec<u8> {
    let mut b = Vec::with_capacity(48);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_be_bytes());
    b.push(kind);
    b.push(transport);
    b
}

/// Bounds-checked big-endian reads: `None` past the end, never a panic.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (b, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*b)
    }

    fn u8(&mut self) -> Option<u8> {
        self.bytes::<1>().map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.bytes().map(u16::from_be_bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        self.bytes().map(u32::from_be_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.bytes().map(u64::from_be_bytes)
    }
}

impl From<HandshakeError> for crate::transport::Error {
    fn from(e: HandshakeError) -> Self {
        crate::transport::Error::new(e.to_string())
    }
}
