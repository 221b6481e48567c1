//! The RPC protocol with no I/O and no clock (quinn-proto's model).
//!
//! [`ClientConn`] and [`ServerConn`] hold one connection's protocol state: framing
//! ([`wire`], where the immediate and frame layouts are documented), the call table,
//! credits, fragmentation with bounded reassembly, deadlines and cancellation.
//! Inputs are `handle_*` calls carrying `now`; frames to send are written by
//! `poll_transmit`/`start_call`/`respond` straight into a buffer the caller provides
//! (a registered send slot in the driver), so the engine never copies a message that
//! fits one slot. Tests drive both ends over a simulated fabric (`tests`).
//!
//! # Driving it
//! Client, per batch of completions: `handle_tokens_returned` (receives reposted),
//! `handle_frame` for each received frame (a completion it returns may borrow the
//! frame's slot), then `poll_transmit` while it writes frames and a send slot is
//! free. Callers: `reserve` (tower's `poll_ready`), `start_call`, and `cancel` when
//! they give up. Timers (for a driver without per-call timers): `poll_timeout`,
//! `handle_timeout`, then `poll_completion`. A lost peer: `handle_peer_lost`, then
//! `poll_completion` until empty.
//! Server: `handle_frame` (a complete request comes back for dispatch), then
//! `poll_cancelled` (handlers to stop) and `poll_transmit` (answers); a handler's
//! reply goes through `respond`.
//!
//! UD sessions (one datagram per call, retransmission and at-most-once execution)
//! are in [`ud`].

mod client;
mod server;
#[cfg(test)]
mod tests;
pub mod ud;
pub mod wire;

pub use client::{ClientConfig, ClientConn, ClientStats, Completion, Reply};
pub use server::{Incoming, RequestBody, ServerConfig, ServerConn, ServerStats};

/// What a call's first frame says besides its message (provisional).
#[derive(Debug, Clone, Copy)]
pub struct CallHead<'a> {
    /// `/package.Service/Method`.
    pub path: &'a str,
    /// Request metadata.
    pub metadata: &'a crate::metadata::MetadataMap,
    /// Time the call may take.
    pub timeout: Option<std::time::Duration>,
}

/// One frame to post: its length at the head of the buffer and its immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written at the head of the buffer.
    pub len: usize,
    /// Immediate data (see [`wire`]).
    pub imm: u32,
}

/// Smallest frame size the engine accepts: room for a head and a useful chunk.
pub const MIN_FRAME: usize = 256;
