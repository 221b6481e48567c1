//! tonic's `Server` knobs for TCP and HTTP/2, so that a tonic server's builder
//! chain compiles unchanged. The TCP ones set each accepted handshake connection,
//! which stays open as its RDMA connection's liveness channel. `max_concurrent_streams`
//! is HTTP/2's cap on a connection's calls in flight, which here is the connection's
//! credit window, and `initial_stream_window_size` each streaming call's message
//! window. The other HTTP/2 ones have nothing to set and are accepted without effect,
//! as the porting guide says.

use std::time::Duration;

use super::Server;

impl<L> Server<L> {
    /// `TCP_NODELAY` on accepted handshake connections (default `true`).
    pub fn tcp_nodelay(mut self, enabled: bool) -> Self {
        self.settings.tcp.nodelay = enabled;
        self
    }

    /// TCP keepalive on accepted handshake connections: probes after this much idle
    /// time (default `None`: off). The kernel's answer finds a client host that
    /// vanished.
    pub fn tcp_keepalive(mut self, idle: Option<Duration>) -> Self {
        self.settings.tcp.keepalive = idle;
        self
    }

    /// Time between TCP keepalive probes (the kernel's default when `None`).
    pub fn tcp_keepalive_interval(mut self, interval: Option<Duration>) -> Self {
        self.settings.tcp.keepalive_interval = interval;
        self
    }

    /// TCP keepalive probes unanswered before the connection drops (the kernel's
    /// default when `None`).
    pub fn tcp_keepalive_retries(mut self, retries: Option<u32>) -> Self {
        self.settings.tcp.keepalive_retries = retries;
        self
    }

    /// Most calls in flight on one connection, as HTTP/2's limit on concurrent
    /// streams: [`Server::credits_per_connection`] (`None`: its default). A client
    /// at the limit waits for a call to end, as over HTTP/2.
    pub fn max_concurrent_streams(self, max: impl Into<Option<u32>>) -> Self {
        let n = max.into().unwrap_or(crate::transport::DEFAULT_CREDITS);
        self.credits_per_connection(n)
    }

    /// How many bytes of messages each streaming call lets its client send ahead of
    /// the handler, as HTTP/2's stream window (`None`: the default, 1 MiB, hyper's
    /// server default). Counted as each message's length plus 32 B; at least 1 MiB
    /// (the window every sender starts a call with: a smaller size is raised to it),
    /// at most 2^31 - 1. What a call buffers is bounded by it and one message; there
    /// is no connection window beside it.
    pub fn initial_stream_window_size(mut self, size: impl Into<Option<u32>>) -> Self {
        self.settings.stream_window = crate::transport::stream_window_setting(size.into());
        self
    }

    /// HTTP/2's connection window: accepted, no effect (no HTTP/2 here).
    pub fn initial_connection_window_size(self, _size: impl Into<Option<u32>>) -> Self {
        self
    }

    /// HTTP/2's adaptive window: accepted, no effect (no HTTP/2 here).
    pub fn http2_adaptive_window(self, _enabled: Option<bool>) -> Self {
        self
    }

    /// HTTP/2's largest frame: accepted, no effect (frames here are receive slots,
    /// [`Server::slot_size`]).
    pub fn max_frame_size(self, _size: impl Into<Option<u32>>) -> Self {
        self
    }

    /// HTTP/1 (for gRPC-Web): accepted, no effect; clients speak RDMA only.
    pub fn accept_http1(self, _accept: bool) -> Self {
        self
    }

    /// HTTP/2's largest header list: accepted, no effect (a call's metadata is
    /// bounded by the message size limit).
    pub fn http2_max_header_list_size(self, _max: impl Into<Option<u32>>) -> Self {
        self
    }

    /// HTTP/2's pending reset streams (a defence of hyper's): accepted, no effect
    /// (no HTTP/2 here; a reset stream frees its credits at once).
    pub fn http2_max_pending_accept_reset_streams(self, _max: Option<usize>) -> Self {
        self
    }

    /// HTTP/2's locally reset streams (a defence of hyper's): accepted, no effect.
    pub fn http2_max_local_error_reset_streams(self, _max: Option<usize>) -> Self {
        self
    }
}
