//! The options of the handshake's TCP connection, which stays open as the RDMA
//! connection's liveness channel: tonic's `tcp_nodelay` and `tcp_keepalive*` knobs
//! of `Endpoint` and `Server` set them. TCP keepalive, answered by the peer's
//! kernel, finds a peer host that vanished (the liveness channel's own PINGs, the
//! `http2_keep_alive_*` knobs, also find a peer process that hangs).

use std::time::Duration;

use tokio::net::TcpStream;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TcpOptions {
    /// `TCP_NODELAY` (default on: the channel's notices are single bytes).
    pub(crate) nodelay: bool,
    /// Idle time before TCP keepalive probes; `None` leaves keepalive off.
    pub(crate) keepalive: Option<Duration>,
    /// Time between probes (the kernel's default when `None`).
    pub(crate) keepalive_interval: Option<Duration>,
    /// Probes unanswered before the connection is dropped (the kernel's default when
    /// `None`).
    pub(crate) keepalive_retries: Option<u32>,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            nodelay: true,
            keepalive: None,
            keepalive_interval: None,
            keepalive_retries: None,
        }
    }
}

impl TcpOptions {
    /// Sets these options on `tcp`.
    pub(crate) fn apply(&self, tcp: &TcpStream) -> std::io::Result<()> {
        tcp.set_nodelay(self.nodelay)?;
        if self.keepalive.is_some() {
            let ka = keepalive(
                self.keepalive,
                self.keepalive_interval,
                self.keepalive_retries,
            );
            socket2::SockRef::from(tcp).set_tcp_keepalive(&ka)?;
        }
        Ok(())
    }
}

/// TCP keepalive with the idle `time`, probe `interval` and `retries` that are set
/// (the kernel's defaults for the others).
pub(crate) fn keepalive(
    time: Option<Duration>,
    interval: Option<Duration>,
    retries: Option<u32>,
) -> socket2::TcpKeepalive {
    let mut ka = socket2::TcpKeepalive::new();
    if let Some(time) = time {
        ka = ka.with_time(time);
    }
    if let Some(interval) = interval {
        ka = ka.with_interval(interval);
    }
    if let Some(retries) = retries {
        ka = ka.with_retries(retries);
    }
    ka
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn options_reach_the_socket() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let opts = TcpOptions {
            nodelay: false,
            keepalive: Some(Duration::from_secs(30)),
            keepalive_interval: Some(Duration::from_secs(5)),
            keepalive_retries: Some(4),
        };
        opts.apply(&tcp).unwrap();
        let s = socket2::SockRef::from(&tcp);
        assert!(!tcp.nodelay().unwrap());
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap(), Duration::from_secs(30));
        assert_eq!(s.tcp_keepalive_interval().unwrap(), Duration::from_secs(5));
        assert_eq!(s.tcp_keepalive_retries().unwrap(), 4);
        TcpOptions::default().apply(&tcp).unwrap();
        assert!(tcp.nodelay().unwrap());
    }
}
