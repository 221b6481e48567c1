//! tonic's `TcpIncoming`: a bound listener as the stream of accepted handshake
//! connections that [`Router::serve_with_incoming`](super::Router::serve_with_incoming)
//! takes, setting TCP options on each.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::net::{TcpListener, TcpStream};

/// Accepted connections of a listening socket, as tonic's `TcpIncoming`.
///
/// Options set here (`None`: left as the kernel has them) are set on each accepted
/// connection before the server sees it; the server then sets its own
/// (`Server::tcp_nodelay`, on by default, and `Server::tcp_keepalive*` when set).
#[derive(Debug)]
pub struct TcpIncoming {
    listener: TcpListener,
    nodelay: Option<bool>,
    keepalive: Option<Duration>,
    keepalive_interval: Option<Duration>,
    keepalive_retries: Option<u32>,
}

impl TcpIncoming {
    /// Binds `addr` (call it within a tokio runtime).
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let std = std::net::TcpListener::bind(addr)?;
        std.set_nonblocking(true)?;
        Ok(TcpListener::from_std(std)?.into())
    }

    /// `TCP_NODELAY` on each accepted connection.
    pub fn with_nodelay(self, nodelay: Option<bool>) -> Self {
        Self { nodelay, ..self }
    }

    /// TCP keepalive's idle time on each accepted connection.
    pub fn with_keepalive(self, keepalive_time: Option<Duration>) -> Self {
        Self {
            keepalive: keepalive_time,
            ..self
        }
    }

    /// `TCP_KEEPINTVL` on each accepted connection (with a keepalive time, or
    /// turning keepalive on).
    pub fn with_keepalive_interval(self, keepalive_interval: Option<Duration>) -> Self {
        Self {
            keepalive_interval,
            ..self
        }
    }

    /// `TCP_KEEPCNT` on each accepted connection (with a keepalive time, or turning
    /// keepalive on).
    pub fn with_keepalive_retries(self, keepalive_retries: Option<u32>) -> Self {
        Self {
            keepalive_retries,
            ..self
        }
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Sets the options on `tcp`; like tonic's, a failure is logged, not returned.
    fn set_options(&self, tcp: &TcpStream) {
        if let Some(nodelay) = self.nodelay {
            if let Err(e) = tcp.set_nodelay(nodelay) {
                tracing::warn!("error trying to set TCP_NODELAY: {e}");
            }
        }
        // As tonic's: any of the three turns keepalive on.
        let (time, interval, retries) = (
            self.keepalive,
            self.keepalive_interval,
            self.keepalive_retries,
        );
        if time.is_some() || interval.is_some() || retries.is_some() {
            let ka = crate::transport::tcp_options::keepalive(time, interval, retries);
            if let Err(e) = socket2::SockRef::from(tcp).set_tcp_keepalive(&ka) {
                tracing::warn!("error trying to set TCP_KEEPALIVE: {e}");
            }
        }
    }
}

impl From<TcpListener> for TcpIncoming {
    fn from(listener: TcpListener) -> Self {
        TcpIncoming {
            listener,
            nodelay: None,
            keepalive: None,
            keepalive_interval: None,
            keepalive_retries: None,
        }
    }
}

impl Stream for TcpIncoming {
    type Item = io::Result<TcpStream>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.listener.poll_accept(cx) {
            Poll::Ready(Ok((tcp, _))) => {
                self.set_options(&tcp);
                Poll::Ready(Some(Ok(tcp)))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;

    #[tokio::test]
    async fn accepted_connections_carry_the_options() {
        let mut incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
            .unwrap()
            .with_nodelay(Some(true))
            .with_keepalive(Some(Duration::from_secs(40)))
            .with_keepalive_interval(Some(Duration::from_secs(7)))
            .with_keepalive_retries(Some(3));
        let addr = incoming.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let tcp = incoming.next().await.unwrap().unwrap();
        let s = socket2::SockRef::from(&tcp);
        assert!(tcp.nodelay().unwrap());
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap(), Duration::from_secs(40));
        assert_eq!(s.tcp_keepalive_interval().unwrap(), Duration::from_secs(7));
        assert_eq!(s.tcp_keepalive_retries().unwrap(), 3);
    }

    #[tokio::test]
    async fn options_left_unset_stay_as_the_kernel_has_them() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut incoming = TcpIncoming::from(listener);
        let _client = TcpStream::connect(incoming.local_addr().unwrap())
            .await
            .unwrap();
        let tcp = incoming.next().await.unwrap().unwrap();
        assert!(!tcp.nodelay().unwrap());
        assert!(!socket2::SockRef::from(&tcp).keepalive().unwrap());
    }
}
