//! The UD wire format: what every bit of a datagram means.
//!
//! A UD call travels as one datagram each way; there are no fragments and no credits
//! (a datagram with no receive posted is lost, and retransmission covers it).
//!
//! # Immediate data (32 bits)
//!
//! As on RC ([`crate::engine::wire`]): `kind` in bits 31..28, the low 28 bits of the
//! call id in bits 27..0. The receiver checks that they agree with the header's full
//! call id (a mismatch is malformed).
//!
//! | kind | dir | name | payload after the UD header |
//! | --- | --- | --- | --- |
//! | 1 | c→s | `REQ` | [`RequestHead`](crate::engine::wire::RequestHead), path, metadata, the whole body |
//! | 5 | s→c | `RESP` | [`ResponseHead`](crate::engine::wire::ResponseHead), status message, metadata, the whole body (the response message, or for an error the status's details) |
//! | 8 | s→c | `IN_PROGRESS` | nothing: "the call is running, keep waiting" |
//!
//! Every other kind is malformed on UD (dropped and counted), including RC's `CR`
//! (7), which UD used for `IN_PROGRESS` before it had a kind of its own. A status
//! and its details must fit the one datagram: the cut-to-fit rule is
//! [`codec`](crate::engine::codec)'s (the code never changes; metadata or details
//! that do not fit are dropped whole, counted and logged).
//!
//! # UD header (12 bytes at the head of every datagram, big endian)
//!
//! ```text
//! 0 session:u32   4 call_id:u32   8 ack_below:u32
//! ```
//! * `session`: assigned by the server at the handshake (never a QPN, which a new
//!   process may reuse); the server's duplicate-suppression state is keyed by it.
//! * `call_id`: sequential per session from 1, wrapping modulo 2^32 (compared in
//!   serial-number arithmetic; the window is far below 2^31).
//! * `ack_below` (requests; 0 in answers): every call id below it has its reply at the
//!   client, so the server may forget those calls' stored replies. A client keeps its
//!   ids within `[ack_below, ack_below + window)`.
//!
//! The 40-byte GRH that a UD receive buffer starts with is not part of this format:
//! it occupies the receive buffer, not the path MTU.

use crate::engine::wire::{self as rc_wire, Kind};

/// Bytes of the UD header.
pub const UD_HEAD_LEN: usize = 12;

/// The UD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdHead {
    /// Session id.
    pub session: u32,
    /// Full call id.
    pub call_id: u32,
    /// Every id below has its reply at the client (requests only).
    pub ack_below: u32,
}

impl UdHead {
    /// Encodes into the first [`UD_HEAD_LEN`] bytes of `out`.
    pub fn write(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.session.to_be_bytes());
        out[4..8].copy_from_slice(&self.call_id.to_be_bytes());
        out[8..12].copy_from_slice(&self.ack_below.to_be_bytes());
    }

    /// Decodes the header and the kind, checking the immediate against the header.
    pub fn read(imm: u32, dgram: &[u8]) -> Option<(Kind, UdHead)> {
        let b = dgram.get(..UD_HEAD_LEN)?;
        let w = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let h = UdHead {
            session: w(0),
            call_id: w(4),
            ack_below: w(8),
        };
        let (kind, low) = rc_wire::parse_imm(imm)?;
        (low == h.call_id & rc_wire::CALL_ID_MASK).then_some((kind, h))
    }
}

/// The immediate of a datagram of `kind` for call `id`.
pub fn imm(kind: Kind, id: u32) -> u32 {
    rc_wire::imm(kind, id & rc_wire::CALL_ID_MASK)
}

/// `a < b` in serial-number arithmetic.
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_round_trips_and_checks_the_immediate() {
        let h = UdHead {
            session: 9,
            call_id: 0x1234_5678,
            ack_below: 0x1234_5670,
        };
        let mut b = [0u8; UD_HEAD_LEN + 3];
        h.write(&mut b);
        assert_eq!(
            UdHead::read(imm(Kind::Req, h.call_id), &b),
            Some((Kind::Req, h))
        );
        assert_eq!(UdHead::read(imm(Kind::Req, 1), &b), None);
        assert_eq!(UdHead::read(imm(Kind::Req, h.call_id), &b[..5]), None);
        assert!(seq_lt(u32::MAX, 0) && seq_lt(1, 2) && !seq_lt(2, 2));
    }
}
