//! Connections over RDMA: `Channel` (client), `Server`, `Endpoint`.
//!
//! A thin tokio driver around the sans-IO engine (`crate::engine`):
//!
//! * **Client** ([`Channel`]): one RC connection per `Channel` (clones share it), or
//!   with `rdma+ud://` a UD session (see below); both run on one driver skeleton
//!   (`client/`), generic over the transport's connection state.
//!   Callers encode their request straight into a registered send slot and post it
//!   themselves while few calls are open (no hand-off on the send path); with more
//!   open, the driver posts a burst of callers' requests as one list (one doorbell).
//!   One driver task per connection reaps the connection's single CQ (sends and
//!   receives), completes callers' waiters, pushes fragments as credits return, and
//!   runs the engine's timers: it sleeps until the engine's next deadline (and on
//!   UD, retransmission), so a call's deadline is the engine's, on both transports.
//!   `poll_ready` reserves a credit (UD: a window place) and a send slot (tower's
//!   reserve-then-call).
//! * **Server** ([`Server`]): one SRQ fed by one registered receive pool and one CQ
//!   shared by all connections; one task reaps it, answers protocol frames in place,
//!   and runs each complete request's service (routed by `NamedService::NAME`) on
//!   the spot until it first waits, spawning it only then
//!   ([`Server::inline_handlers`]); the answers of one batch of completions leave
//!   each connection as one post list.
//! * **Streams** (RC only; `channel_stream.rs`, `client/stream.rs`,
//!   `server/rc_stream.rs`): a streaming call opens with a `REQ`, its future resolves
//!   with the handler's headers, and then messages flow each way within per-call
//!   credit windows (see `crate::engine::wire`). Each direction's writer pulls one
//!   message from its source only when the call has the peer's credit, encodes it
//!   straight into a send slot, and then waits its turn again among the
//!   connection's other calls. Received stream messages are copied out of their
//!   receive slot (reposted at once), so a slow reader holds at most its call's
//!   window of messages and never the connection's receives. A UD channel opens
//!   its RC connection for streams; against `accept_rc(false)` they fail
//!   `UNIMPLEMENTED`, naming why. The call's deadline covers it whole (the client
//!   resets it at the deadline); a dead peer, a lost connection or a shutdown past
//!   its grace period ends every open stream `UNAVAILABLE`, and a graceful shutdown
//!   lets them finish within the grace period.
//! * Completion reaping is selectable ([`CompletionMode`]): busy polling, event-driven
//!   under tokio, or adaptive (spin briefly after activity, then sleep; the default).
//! * Liveness: the handshake's TCP connection stays open; when it closes, every
//!   in-flight call of the connection ends `UNAVAILABLE` (client) or the connection's
//!   QP and credits are reclaimed (server).
//!
//! # UD transport
//!
//! `rdma+ud://host:port` (or [`Endpoint::ud`]) makes a `Channel` call over one UD
//! queue pair instead of an RC connection: no per-client QP at the server (eRPC's and
//! FaSST's model), for calls whose request and reply fit one datagram.
//!
//! * **Sessions.** The client still does the TCP handshake; the server assigns a
//!   32-bit session id, and the TCP connection stays open as the liveness channel: a
//!   session's server state is freed when it closes, and a client sees `UNAVAILABLE`
//!   when the server goes. Duplicate suppression is keyed by session, never by QPN.
//! * **Payload limit.** One datagram: the port's active MTU (capped at 4096; 1024 on
//!   rxe over a 1500-byte netdev), which holds rdma-rpc's 12-byte UD header, the
//!   request head, path, metadata and message. The 40-byte GRH lands in the receive
//!   buffer (sized MTU + 40), not in the MTU. [`Channel::ud_datagram_limit`] says it.
//! * **Too big.** A request that does not fit goes over an RC connection the channel
//!   opens on first need, when the server accepts RC (the default); with
//!   [`Server::accept_rc`]`(false)` it fails `RESOURCE_EXHAUSTED` naming the limit. A
//!   reply that does not fit fails `RESOURCE_EXHAUSTED` naming the limit (the handler
//!   ran; it is not run again over RC).
//! * **Reliability** (`crate::engine::ud`): the client retransmits on timeout with
//!   exponential backoff (2 ms before a measured RTT, then twice the smoothed RTT,
//!   1–100 ms) and gives up at the call's deadline (`DEADLINE_EXCEEDED`) or, with no
//!   deadline, after 40 retransmissions (`UNAVAILABLE`, unless the server keeps
//!   answering "in progress"). The server executes each call at most once: a window
//!   of `ud_window` entries per session (default 32) holds running calls and stored
//!   replies, which it replays to a retransmitted request. Stray and duplicate replies
//!   are dropped and counted ([`Channel::ud_stats`], [`UdStatsHandle`]).
//! * **Bound.** Per session at most `ud_window` entries and `ud_window` × datagram
//!   bytes of stored replies; at most [`Server::max_ud_sessions`] sessions (default
//!   4096), beyond which the handshake is refused naming the limit.
//! * **Receives.** The server's UD QP has its own receive queue and pool
//!   ([`Server::ud_receive_slots`], default 1024), not the SRQ: an unflow-controlled
//!   UD flood cannot take the receives the RC credits count on; a datagram that finds
//!   no receive is lost, and retransmission covers it.

mod balance;
mod balanced_channel;
pub mod channel;
mod channel_stream;
mod client;
mod completion;
mod encode_ahead;
mod encode_off;
mod endpoint;
mod endpoint_uri;
mod heap_release;
mod jitter;
pub(crate) mod lend_windows;
mod limit;
mod ready;
pub(crate) mod rendezvous;
pub mod server;
mod spin_budget;
mod stream_batch;
mod tcp_options;
mod tonic_knobs;
mod ud_device;
mod unstranded;
mod user_agent;

use std::fmt;

pub use channel::Channel;
pub use completion::CompletionMode;
pub use endpoint::Endpoint;
/// A URI, as tonic's `transport::Uri` (`http::Uri`).
pub use http::Uri;
pub use rendezvous::{
    RendezvousStats, DEFAULT_CLIENT_POOL_BYTES, DEFAULT_RENDEZVOUS_THRESHOLD,
    DEFAULT_SERVER_POOL_BYTES,
};
pub use server::{Router, Server, UdStatsHandle};
// The UD counters `Channel::ud_stats` and `UdStatsHandle::get` return.
pub use crate::engine::ud::{UdClientStats, UdServerStats};

/// A transport failure (connecting, binding, a handshake), as tonic's: its
/// `Display` is the kind alone (`transport error`, `invalid URI`), and what went
/// wrong is its [`source`](std::error::Error::source), also shown by `Debug`.
pub struct Error {
    kind: ErrorKind,
    cause: Box<dyn std::error::Error + Send + Sync + 'static>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorKind {
    Transport,
    InvalidUri,
    InvalidUserAgent,
}

/// What went wrong, in words: the source of an [`Error`] made from text.
#[derive(Debug)]
struct Cause(String);

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Cause {}

impl Error {
    pub(crate) fn new(msg: impl Into<String>) -> Error {
        Error::of(ErrorKind::Transport, Cause(msg.into()))
    }

    /// An address that is not one (`invalid URI`, as tonic's).
    pub(crate) fn invalid_uri(msg: impl Into<String>) -> Error {
        Error::of(ErrorKind::InvalidUri, Cause(msg.into()))
    }

    /// `Endpoint::user_agent` given what is not a header value (as tonic's).
    pub(crate) fn invalid_user_agent(msg: impl Into<String>) -> Error {
        Error::of(ErrorKind::InvalidUserAgent, Cause(msg.into()))
    }

    fn of(kind: ErrorKind, cause: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error {
            kind,
            cause: Box::new(cause),
        }
    }

    /// What went wrong, without the kind.
    pub(crate) fn reason(&self) -> String {
        self.cause.to_string()
    }

    /// The kind and the cause in one line, for logs and statuses.
    pub(crate) fn detailed(&self) -> String {
        format!("{self}: {}", self.cause)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            ErrorKind::Transport => "transport error",
            ErrorKind::InvalidUri => "invalid URI",
            ErrorKind::InvalidUserAgent => "user agent is not a valid header value",
        })
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("transport::Error")
            .field(&self.kind)
            .field(&self.cause.to_string())
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.cause)
    }
}

impl From<rpc_transport::Error> for Error {
    fn from(e: rpc_transport::Error) -> Error {
        Error::of(ErrorKind::Transport, e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::of(ErrorKind::Transport, e)
    }
}

/// Locks a mutex, ignoring poisoning: a panicking handler or caller must not wedge a
/// connection's shared state for everyone else.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stream window as `initial_stream_window_size` sets it: `None` is the default
/// (the wire's window at open, 1 MiB). The engine keeps a size within what a window
/// can be (at least that, at most 2^31 - 1).
pub(crate) fn stream_window_setting(size: Option<u32>) -> u32 {
    size.unwrap_or(crate::engine::wire::STREAM_WINDOW)
}

/// Default frame (slot) size: one slot holds small calls whole.
pub(crate) const DEFAULT_SLOT_SIZE: usize = 8 * 1024;
/// Default calls in flight per connection. The handshake asks for one credit more:
/// the engine keeps the last one for CANCEL frames.
pub(crate) const DEFAULT_CREDITS: u32 = 256;
/// Default RC transport retry budget: an ACK timeout of ~537 ms (code 17) and 7
/// retransmissions, about 4.3 s before a peer that stopped answering is declared
/// dead. Long enough to ride out a 2.5 s pause of the peer process (a GC, SIGSTOP,
/// swap), where verbs' usual 14 (~0.5 s in all) kills the connection; a peer that
/// is really gone is found by its handshake connection closing, long before (on
/// rxe, which retries forever at 7, that and keepalive are the only ways).
pub(crate) const DEFAULT_RC_RETRY: rpc_transport::RcRetry = rpc_transport::RcRetry {
    ack_timeout: 17,
    retry_cnt: 7,
};
/// Default largest message, each way (the issue asks for at least 64 MiB).
pub(crate) const DEFAULT_MAX_MESSAGE: usize = 64 * 1024 * 1024 + 1024 * 1024;
