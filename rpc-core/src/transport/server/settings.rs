//! A server's settings and their defaults (set through [`super::Server`]'s builder).

use std::time::Duration;

use super::liveness::LiveSettings;
use super::ud_side::{UdSettings, UdStatsHandle};
use crate::handshake::liveness::Keepalive;
use crate::transport::completion::CompletionMode;
use crate::transport::{DEFAULT_CREDITS, DEFAULT_MAX_MESSAGE, DEFAULT_SLOT_SIZE};

#[derive(Debug, Clone)]
pub(super) struct ServerSettings {
    pub(super) credits: u32,
    pub(super) slot_size: usize,
    pub(super) pool_slots: u32,
    /// RC connections at once, at most (beyond: refused, naming the limit).
    pub(super) max_connections: usize,
    pub(super) max_message: usize,
    pub(super) mode: CompletionMode,
    pub(super) device: Option<String>,
    pub(super) inline: bool,
    pub(super) rdma_device: Option<rpc_transport::Device>,
    pub(super) ud: UdSettings,
    pub(super) ud_stats: Option<UdStatsHandle>,
    /// How long a connected peer may take to send its hello.
    pub(super) handshake_timeout: Duration,
    /// Connections accepted whose hello has not arrived yet, at most.
    pub(super) max_pending_handshakes: usize,
    /// How long a shutdown waits for calls in flight.
    pub(super) shutdown_grace: Duration,
    /// Each client's liveness channel: PINGs and retirement by age.
    pub(super) live: LiveSettings,
    /// `Server::timeout`: a cap on every handler's time.
    pub(super) timeout: Option<Duration>,
    /// `Server::concurrency_limit_per_connection`.
    pub(super) concurrency_limit: Option<usize>,
    /// `Server::load_shed`.
    pub(super) load_shed: bool,
    /// `Server::trace_fn`.
    pub(super) trace: Option<super::trace_fn::TraceFn>,
    /// Bodies longer than this go by reference (RC, RDMA Read agreed).
    pub(super) rendezvous_threshold: usize,
    /// Registered bytes the server's pool (shared by its connections) may hold.
    pub(super) rendezvous_pool_bytes: usize,
    /// Where the pool's occupancy is reported.
    pub(super) rendezvous_stats: Option<crate::transport::RendezvousStats>,
    /// Accepted handshake connections' TCP options.
    pub(super) tcp: crate::transport::tcp_options::TcpOptions,
    /// `Server::initial_stream_window_size`: what each streaming call lets the
    /// client send ahead of its handler.
    pub(super) stream_window: u32,
}

/// gRPC's server defaults: a PING every 2 hours, answered within 20 s.
pub(super) const DEFAULT_SERVER_KEEPALIVE: Keepalive = Keepalive {
    interval: Duration::from_secs(2 * 60 * 60),
    timeout: Duration::from_secs(20),
};

/// RC connections a server holds at once by default.
pub(super) const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Receives on the shared receive queue by default (4,112 slots of 8 KiB, 32 MiB,
/// resident from the start): 16 full windows (256 calls and the CANCEL token).
/// Half of it keeps the minimal window (2) of every connection
/// [`DEFAULT_MAX_CONNECTIONS`] still allows, so none of those is ever refused for
/// credit; windows grow into the rest.
pub(super) const DEFAULT_POOL_SLOTS: u32 = 16 * (DEFAULT_CREDITS + 1);

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            credits: DEFAULT_CREDITS,
            slot_size: DEFAULT_SLOT_SIZE,
            pool_slots: DEFAULT_POOL_SLOTS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_message: DEFAULT_MAX_MESSAGE,
            mode: CompletionMode::default(),
            device: None,
            inline: true,
            rdma_device: None,
            ud: UdSettings {
                window: 32,
                max_sessions: 4096,
                recv_slots: 1024,
                accept_rc: true,
            },
            ud_stats: None,
            handshake_timeout: Duration::from_secs(10),
            max_pending_handshakes: 1024,
            shutdown_grace: Duration::from_secs(10),
            // gRPC's keepalive; no maximum connection age (tonic's default).
            live: LiveSettings {
                keepalive: Some(DEFAULT_SERVER_KEEPALIVE),
                max_age: None,
                age_grace: None,
            },
            timeout: None,
            concurrency_limit: None,
            load_shed: false,
            trace: None,
            rendezvous_threshold: crate::transport::DEFAULT_RENDEZVOUS_THRESHOLD,
            rendezvous_pool_bytes: crate::transport::rendezvous::DEFAULT_SERVER_POOL_BYTES,
            rendezvous_stats: None,
            tcp: Default::default(),
            stream_window: crate::engine::wire::STREAM_WINDOW,
        }
    }
}
