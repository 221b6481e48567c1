//! Connections over RDMA: `Channel` (client), `Server`, `Endpoint`.
//!
//! A thin tokio driver around [`crate::engine`]:
//!
//! * **Client** ([`Channel`]): one RC connection per `Channel` (clones share it).
//!   Callers encode their request straight into a registered send slot and post it
//!   themselves (no hand-off on the send path); one driver task per connection reaps
//!   the connection's single CQ (sends and receives), completes callers' waiters, and
//!   pushes fragments as credits return. `poll_ready` reserves a credit and a send
//!   slot (tower's reserve-then-call).
//! * **Server** ([`Server`]): one SRQ fed by one registered receive pool and one CQ
//!   shared by all connections; one task reaps it, answers protocol frames in place,
//!   and spawns a task per complete request that runs the service (routed by
//!   `NamedService::NAME`) and encodes the reply into the connection's send slot.
//! * Completion reaping is selectable ([`CompletionMode`]): busy polling, event-driven
//!   under tokio, or adaptive (spin briefly after activity, then sleep).
//! * Liveness: the handshake's TCP connection stays open; when it closes, every
//!   in-flight call of the connection ends `UNAVAILABLE` (client) or the connection's
//!   QP and credits are reclaimed (server).

mod client;
mod endpoint;
mod poll;
mod server;
mod server_conn;

use std::fmt;

pub use client::Channel;
pub use endpoint::Endpoint;
pub use poll::CompletionMode;
pub use server::{Router, Server};

/// A transport failure (connecting, binding, a handshake).
#[derive(Debug)]
pub struct Error(String);

impl Error {
    pub(crate) fn new(msg: impl Into<String>) -> Error {
        Error(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "transport error: {}", self.0)
    }
}

impl std::error::Error for Error {}

impl From<rpc_transport::Error> for Error {
    fn from(e: rpc_transport::Error) -> Error {
        Error(e.to_string())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error(e.to_string())
    }
}

/// Default frame (slot) size: one slot holds small calls whole.
/// Locks a mutex, ignoring poisoning: a panicking handler or caller must not wedge a
/// connection's shared state for everyone else.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) const DEFAULT_SLOT_SIZE: usize = 8 * 1024;
/// Default calls in flight per connection. The handshake asks for one credit more:
/// the engine keeps the last one for CANCEL frames.
pub(crate) const DEFAULT_CREDITS: u32 = 256;
/// Default largest message, each way (the issue asks for at least 64 MiB).
pub(crate) const DEFAULT_MAX_MESSAGE: usize = 64 * 1024 * 1024 + 1024 * 1024;
