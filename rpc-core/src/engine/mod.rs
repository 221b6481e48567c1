//! The RPC protocol with no I/O and no clock (quinn-proto's model).
//!
//! [`ClientConn`] and [`ServerConn`] hold one RC connection's protocol state: the call
//! table, credits, fragmentation with bounded reassembly, deadlines and cancellation.
//! What a call's frames carry (request head, path, metadata, response, final status
//! with its details) is written once, in [`codec`], for RC and UD alike; [`wire`]
//! documents every bit of the frames. Inputs are `handle_*` calls carrying `now`;
//! frames to send are written by `poll_transmit`/`start_call`/`respond` straight into
//! a buffer the caller provides (a registered send slot in the driver), so the engine
//! never copies a message that fits one slot. Tests drive both ends over a simulated
//! fabric (`tests`).
//!
//! # Driving it
//! Client, per batch of completions: `handle_tokens_returned` (receives reposted),
//! `handle_frame` for each received frame (a completion it returns may borrow the
//! frame's slot), then `poll_transmit` while it writes frames and a send slot is
//! free. Callers: `reserve` (tower's `poll_ready`), `start_call`, and `cancel` when
//! they give up. Deadlines are the engine's: after each batch, `poll_timeout` (O(1))
//! says when the earliest open call's deadline passes; at that time `handle_timeout`
//! ends the due calls `DEADLINE_EXCEEDED` and queues their `CANCEL`s, then
//! `poll_completion` drains them and `poll_transmit` sends the `CANCEL`s. A lost
//! peer: `handle_peer_lost`, then `poll_completion` until empty.
//! Server: `handle_frame` (a complete request comes back for dispatch), then
//! `poll_cancelled` (handlers to stop) and `poll_transmit` (answers); a handler's
//! reply, a response or a status, goes through `respond`.
//!
//! UD sessions (one datagram per call, retransmission and at-most-once execution)
//! are in [`ud`]: a second state machine (RC's credits and UD's retransmission differ
//! in kind), sharing the codec.
//!
//! # What comes next (design, not built)
//! A call becomes two half-streams of messages, each ended by end-of-stream, closed
//! by the server's final status (trailers) or by a reset from either side; unary is
//! one message each way and keeps today's one-frame-each-way path. [`wire`] reserves
//! the frame kinds this needs (stream message, half-close, trailers, reset, credit
//! grant) and the head flags (a streaming `REQ`; a body by reference, pulled by RDMA
//! Read), and says what each will mean. The engines' outputs then become one event
//! per call and step, as quinn's `Connection::poll` (headers, message, trailers,
//! reset), in place of one [`Completion`] per call, so unary and streams share one
//! driver loop.

mod client;
pub mod codec;
pub mod credit;
mod server;
#[cfg(test)]
mod tests;
pub mod ud;
pub mod wire;

pub use client::{ClientConfig, ClientConn, ClientStats, Completion, Reply};
pub use codec::CallHead;
pub use credit::CreditWindow;
pub use server::{Incoming, RequestBody, ServerConfig, ServerConn, ServerStats};

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
