//! UD sessions: one datagram per call each way, made reliable here.
//!
//! [`UdClient`] keeps at most `window` calls outstanding, retransmits each on timeout
//! with exponential backoff (from an RTT estimate; Karn's rule: retransmitted calls
//! give no sample), gives up at the call's deadline (`DEADLINE_EXCEEDED`) or, with no
//! deadline, after a retry budget (`UNAVAILABLE`), and matches replies by call id,
//! dropping and counting stray and duplicate ones. [`UdServer`] executes each call at
//! most once: see its module for the window and the bound on its state. The wire is
//! in [`wire`]. Tests drive both over a simulated lossy, duplicating, reordering
//! fabric with a simulated clock (`tests`).
//!
//! A call its caller gives up on is simply forgotten (no CANCEL datagram): the
//! server's stored reply goes when the client's `ack_below` passes its id.
//!
//! # Driving it
//! Client: `reserve` (tower's `poll_ready`), `start_call` (post the datagram),
//! `handle_datagram` per receive, `handle_timeout` at `poll_timeout` (repost what it
//! names), then `poll_completion`; `cancel` when a caller gives up;
//! `handle_peer_lost` when the liveness connection closes. Every ended call hands
//! its send slot back. Server: `open_session`/`close_session` with the handshake,
//! `handle_datagram` per receive (a new call comes back for dispatch), `respond`
//! when its handler finishes, and `poll_transmit` for replays and `IN_PROGRESS`.

mod client;
mod server;
#[cfg(test)]
mod tests;
pub mod wire;

pub use client::{UdClient, UdClientConfig, UdClientStats, UdCompletion};
pub use server::{UdIncoming, UdServer, UdServerConfig, UdServerStats};
