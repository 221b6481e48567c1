//! The server: [`Server`] (builder) → [`Router`] (services added) → serving.
//!
//! * `srq_side`: one SRQ fed by one registered receive pool and one CQ shared by all
//!   RC connections; one task reaps it, answers protocol frames in place, and runs
//!   each complete request's service on the spot until it first waits
//!   ([`Server::inline_handlers`]); the answers of one batch of completions leave
//!   each connection as one post list. `rc_peer` is one connection as the server
//!   sees it; `rc_stream` its streaming calls (inbound halves and the writer that
//!   sends a handler's stream).
//! * `ud_side`: one UD QP with its own receive queue, its poller and the sessions.
//! * `handler`: running a call's service (through the server's layers, if any, to
//!   its route in [`crate::service::Routes`]), shared by both sides.

mod builder;
mod call_box;
mod credit_pool;
mod handler;
mod liveness;
mod log_limit;
mod pending;
mod rc_peer;
mod rc_stream;
mod router;
mod settings;
mod srq_side;
mod stream_inbound;
mod table_room;
mod tcp_incoming;
mod tonic_knobs;
mod trace_fn;
mod ud_side;

pub use builder::Server;
pub use router::Router;
pub use tcp_incoming::TcpIncoming;
pub use ud_side::UdStatsHandle;
