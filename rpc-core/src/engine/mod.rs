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
//! # Streaming calls (RC)
//! A streaming call is two half-streams of messages, closed by the server's final
//! status (trailers) or a reset from the client ([`wire`], "Streaming calls", says
//! every frame and credit). Its state lives in `stream`, beside the unary engines:
//! [`ClientConn`] and [`ServerConn`] hand it only frames and ids of streaming calls
//! (ids with [`wire::STREAM_ID_BIT`]), so a unary call costs what it did. Inputs
//! are the same `handle_*` calls; each side's outputs are one event per call and
//! step ([`StreamEvent`]: headers, message, writable, end; [`ServerStreamEvent`]:
//! message, half-closed, writable, reset), drained after each batch with
//! `poll_stream_event`. A caller sends a message with `send_stream_message` when
//! [`ClientStreams::can_send`] / [`ServerStreams::can_send`] says the call has the
//! peer's credit (the client also on a reserved token, as a call's first frame);
//! everything else (fragments of long messages, grants, half-close, reset,
//! trailers, returned connection credits) goes out through `poll_transmit`.
//!
//! # Large unary messages by reference (RC)
//! A unary body above the rendezvous threshold travels by reference ([`wire`],
//! "Large messages by reference"): the sender's driver encodes it into a pooled
//! region and the engine writes its descriptor; the receiving engine queues a
//! [`ReadOp`] (`poll_read`), its driver performs the RDMA Read and reports with
//! `handle_read_done`; regions come back through `poll_released` (server) and the
//! call's answer (client). Stream messages above the threshold go the same way
//! (`send_stream_message_by_ref`; their reads come out of the same `poll_read`,
//! tagged with [`rendezvous::STREAM_READ_TAG`], and their regions back through
//! `poll_released_message`).

mod client;
pub mod codec;
pub mod credit;
pub mod gather;
pub mod rendezvous;
mod server;
mod stream;
#[cfg(test)]
mod tests;
pub mod ud;
pub mod wire;

pub use client::{ClientConfig, ClientConn, ClientStats, Completion, Reply};
pub use codec::CallHead;
pub use credit::CreditWindow;
pub use rendezvous::ReadOp;
pub use server::{Incoming, RequestBody, ServerConfig, ServerConn, ServerStats};
pub use stream::client::{ClientStreams, StreamEvent};
pub use stream::server::{ServerStreamEvent, ServerStreams};
pub use stream::Arrived;

/// The clock as the engine takes it: an `Instant` the caller read, or a read
/// deferred until the engine needs one ([`OnDemand`]). Starting a call with no
/// deadline, or handling a client frame, needs none: a unary call then reads no
/// clock at all (each read costs about a hundred instructions).
pub trait Now {
    /// The time, reading the clock now if it was deferred.
    fn now(self) -> std::time::Instant;
}

impl Now for std::time::Instant {
    fn now(self) -> std::time::Instant {
        self
    }
}

/// A clock read only if the engine needs the time.
pub struct OnDemand<F>(pub F);

impl<F: FnOnce() -> std::time::Instant> Now for OnDemand<F> {
    fn now(self) -> std::time::Instant {
        (self.0)()
    }
}

/// A clock read at most once, when first needed; every later need gets the same
/// time (the frames of one batch of completions).
#[derive(Debug, Default)]
pub struct ReadOnce(std::cell::Cell<Option<std::time::Instant>>);

impl Now for &ReadOnce {
    fn now(self) -> std::time::Instant {
        match self.0.get() {
            Some(t) => t,
            None => {
                let t = std::time::Instant::now();
                self.0.set(Some(t));
                t
            }
        }
    }
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
