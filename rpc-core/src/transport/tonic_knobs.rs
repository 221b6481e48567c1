//! tonic's `Endpoint` knobs for the TCP connection and HTTP/2, so that a tonic
//! client's builder chain compiles unchanged. The TCP ones set the handshake
//! connection, which stays open as the RDMA connection's liveness channel
//! ([`super::tcp_options`]). `initial_stream_window_size` sets each streaming call's
//! message window. The other HTTP/2 ones have nothing to set: there is no HTTP/2
//! here, and flow control is the connection's credits and each stream's message
//! credits. They are accepted and change nothing, as the porting guide says.

use std::time::Duration;

use super::Endpoint;

impl Endpoint {
    /// `TCP_NODELAY` on the handshake connection (default `true`).
    pub fn tcp_nodelay(mut self, enabled: bool) -> Self {
        self.settings.tcp.nodelay = enabled;
        self
    }

    /// TCP keepalive on the handshake connection: probes after this much idle time
    /// (default `None`: off). The kernel's answer finds a server host that vanished.
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

    /// How many bytes of messages each streaming call lets the server send ahead of
    /// its reader, as HTTP/2's stream window (`None`: the default, 1 MiB; hyper's
    /// client default is 2 MiB, within a 5 MiB connection window, which has no
    /// counterpart here). Counted as each message's length plus 32 B; at least
    /// 1 MiB (the window every sender starts a call with: a smaller size is raised
    /// to it), at most 2^31 - 1. What a call buffers is bounded by it and one
    /// message.
    pub fn initial_stream_window_size(mut self, size: impl Into<Option<u32>>) -> Self {
        self.settings.stream_window = super::stream_window_setting(size.into());
        self
    }

    /// HTTP/2's connection window: accepted, no effect (no HTTP/2 here).
    pub fn initial_connection_window_size(self, _size: impl Into<Option<u32>>) -> Self {
        self
    }

    /// HTTP/2's adaptive window: accepted, no effect (no HTTP/2 here).
    pub fn http2_adaptive_window(self, _enabled: bool) -> Self {
        self
    }

    /// HTTP/2's largest frame: accepted, no effect (frames here are receive slots).
    pub fn max_frame_size(self, _size: impl Into<Option<u32>>) -> Self {
        self
    }

    /// HPACK's header table: accepted, no effect (metadata travels in the call's
    /// own frame, not compressed).
    pub fn http2_header_table_size(self, _size: u32) -> Self {
        self
    }

    /// HTTP/2's largest header list: accepted, no effect (a call's metadata is
    /// bounded by the message size limit).
    pub fn http2_max_header_list_size(self, _size: u32) -> Self {
        self
    }

    /// The `:authority`/origin tonic sends: accepted, no effect (no HTTP here; the
    /// server is the address dialled).
    pub fn origin(self, _origin: super::Uri) -> Self {
        self
    }

    /// The size of tonic's request buffer (a `tower::Buffer` in front of its
    /// connection): accepted, no effect. A call here goes straight to its
    /// connection, waiting in `poll_ready` for a credit; none is queued in between.
    pub fn buffer_size(self, _size: impl Into<Option<usize>>) -> Self {
        self
    }

    /// The local IP address the handshake connection leaves from, and so the one
    /// the default soft device serves the RDMA connection on (default `None`: the
    /// kernel's choice, by its route to the server).
    pub fn local_address(mut self, addr: Option<std::net::IpAddr>) -> Self {
        self.settings.local_address = addr;
        self
    }
}
