//! `Channel`: the client handle, over an RC connection or a UD session.

use std::sync::Arc;
use std::task::{Context, Poll};

use prost::Message;
use tokio::sync::OnceCell;
use tower::{Service, ServiceExt};

use crate::client::{IncomingReply, OutgoingCall};
use crate::engine::ud::UdClientStats;
use crate::server::BoxFuture;
use crate::status::Status;
use crate::transport::client::rc::{self, RcLink};
use crate::transport::client::ud::{self, UdLink};
use crate::transport::client::LinkChannel;
use crate::transport::endpoint::Endpoint;
use crate::transport::Error;

/// A client connection: cheap to clone (clones share it), many calls in flight, a
/// `tower::Service` whose `poll_ready` waits for room to send.
///
/// Over RC (`rdma://`), one reliable connected queue pair. Over UD (`rdma+ud://`, or
/// [`Endpoint::ud`]), one UD QP and a session at the server: each call is one
/// datagram each way, retransmitted on timeout and executed at most once by the
/// server; a call too big for a datagram goes over RC when the server accepts it,
/// else fails `RESOURCE_EXHAUSTED` naming the UD payload limit.
#[derive(Clone)]
pub struct Channel {
    transport: Transport,
}

#[derive(Clone)]
enum Transport {
    Rc(LinkChannel<RcLink>),
    Ud {
        ud: LinkChannel<UdLink>,
        /// The RC connection for calls too big for a datagram, opened on first need
        /// and shared by the channel's clones.
        rc: Arc<OnceCell<LinkChannel<RcLink>>>,
        endpoint: Arc<Endpoint>,
    },
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.transport {
            Transport::Rc(c) => c.fmt(f),
            Transport::Ud { ud, .. } => ud.fmt(f),
        }
    }
}

impl Channel {
    /// Connects to `rdma://host:port` (RC) or `rdma+ud://host:port` (UD).
    pub async fn connect(uri: impl Into<String>) -> Result<Channel, Error> {
        Endpoint::from_shared(uri)?.connect().await
    }

    pub(crate) fn rc(c: LinkChannel<RcLink>) -> Channel {
        Channel {
            transport: Transport::Rc(c),
        }
    }

    pub(crate) fn ud(ud: LinkChannel<UdLink>, ep: &Endpoint) -> Channel {
        let mut endpoint = ep.clone();
        endpoint.settings.ud = false;
        Channel {
            transport: Transport::Ud {
                ud,
                rc: Arc::new(OnceCell::new()),
                endpoint: Arc::new(endpoint),
            },
        }
    }

    /// The UD session's counters (retransmissions, dropped replies, ...); `None` on RC.
    pub fn ud_stats(&self) -> Option<UdClientStats> {
        match &self.transport {
            Transport::Rc(_) => None,
            Transport::Ud { ud, .. } => Some(ud.with_link(|l| l.engine().stats())),
        }
    }

    /// The UD payload limit in bytes: the largest datagram (rdma-rpc's 12-byte UD
    /// header, the request head, path, metadata and message); `None` on RC.
    pub fn ud_datagram_limit(&self) -> Option<usize> {
        match &self.transport {
            Transport::Rc(_) => None,
            Transport::Ud { ud, .. } => Some(ud.with_link(|l| l.engine().config().datagram)),
        }
    }
}

// Here rather than in `endpoint.rs`, so that an endpoint stays plain settings that
// the transports read without importing the channel built from them.
impl Endpoint {
    /// Connects.
    pub async fn connect(&self) -> Result<Channel, Error> {
        let t = self.settings.connect_timeout;
        let connect = async {
            if self.settings.ud {
                ud::connect(self).await.map(|c| Channel::ud(c, self))
            } else {
                rc::connect(self).await.map(Channel::rc)
            }
        };
        tokio::time::timeout(t, connect).await.map_err(|_| {
            Error::new(format!(
                "connecting to {}:{} timed out",
                self.host, self.port
            ))
        })?
    }
}

impl<M: Message + Send + 'static> Service<OutgoingCall<M>> for Channel {
    type Response = IncomingReply;
    type Error = Status;
    type Future = BoxFuture<IncomingReply>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        match &mut self.transport {
            Transport::Rc(c) => Service::<OutgoingCall<M>>::poll_ready(c, cx),
            Transport::Ud { ud, .. } => Service::<OutgoingCall<M>>::poll_ready(ud, cx),
        }
    }

    fn call(&mut self, call: OutgoingCall<M>) -> Self::Future {
        match &mut self.transport {
            Transport::Rc(c) => c.call(call),
            Transport::Ud { ud, rc, endpoint } => {
                let (fits, accepts_rc) = ud.with_link(|l| {
                    let room = l
                        .engine()
                        .config()
                        .body_room(call.path, call.metadata.encoded_len());
                    (call.message.encoded_len() <= room, l.accepts_rc())
                });
                if fits || !accepts_rc {
                    // Too big without RC: the engine fails it naming the UD limit.
                    return ud.call(call);
                }
                // Too big for a datagram: over RC, opened on first need.
                ud.unreserve();
                let (rc, endpoint) = (rc.clone(), endpoint.clone());
                Box::pin(async move {
                    let rc = rc
                        .get_or_try_init(|| rc::connect(&endpoint))
                        .await
                        .map_err(|e| Status::unavailable(format!("RC fallback: {e}")))?;
                    let mut rc = rc.clone();
                    ServiceExt::<OutgoingCall<M>>::ready(&mut rc).await?;
                    rc.call(call).await
                })
            }
        }
    }
}
