//! A server's settings and their defaults (set through [`super::Server`]'s builder).

use std::time::Duration;

use super::ud_side::{UdSettings, UdStatsHandle};
use crate::transport::completion::CompletionMode;
use crate::transport::{DEFAULT_CREDITS, DEFAULT_MAX_MESSAGE, DEFAULT_SLOT_SIZE};

#[derive(Debug, Clone)]
pub(super) struct ServerSettings {
    pub(super) credits: u32,
    pub(super) slot_size: usize,
    pub(super) pool_slots: u32,
    pub(super) max_message: usize,
    pub(super) mode: CompletionMode,
    pub(super) device: Option<String>,
    pub(super) inline: bool,
    pub(super) rdma_device: Option<rpc_transport::Device>,
    pub(super) ud: UdSettings,
    pub(super) ud_stats: Option<UdStatsHandle>,
    /// `Server::timeout`: a cap on every handler's time.
    pub(super) timeout: Option<Duration>,
    /// `Server::concurrency_limit_per_connection`.
    pub(super) concurrency_limit: Option<usize>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            credits: DEFAULT_CREDITS,
            slot_size: DEFAULT_SLOT_SIZE,
            pool_slots: 16 * (DEFAULT_CREDITS + 1),
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
            timeout: None,
            concurrency_limit: None,
        }
    }
}
