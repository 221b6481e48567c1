//! `Channel`: the client handle, over an RC connection or a UD session.

use std::task::{Context, Poll};

use prost::Message;
use tower::{Service, ServiceExt};

use crate::client::{IncomingReply, OutgoingCall};
use crate::engine::ud::UdClientStats;
use crate::server::BoxFuture;
use crate::status::Status;
use crate::transport::client::rc::RcLink;
use crate::transport::client::ud::UdLink;
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
        /// The RC connection for calls too big for a datagram, dialed on first need
        /// and shared by the channel's clones.
        rc: LinkChannel<RcLink>,
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

    /// A channel over `endpoint` that dials on its first call.
    fn lazy(endpoint: &Endpoint) -> Channel {
        let transport = if endpoint.settings.ud {
            let mut rc = endpoint.clone();
            rc.settings.ud = false;
            Transport::Ud {
                ud: LinkChannel::lazy(endpoint.clone()),
                rc: LinkChannel::lazy(rc),
            }
        } else {
            Transport::Rc(LinkChannel::lazy(endpoint.clone()))
        };
        Channel { transport }
    }

    /// The UD session's counters (retransmissions, dropped replies, ...); `None` on RC
    /// and while no session is up.
    pub fn ud_stats(&self) -> Option<UdClientStats> {
        match &self.transport {
            Transport::Rc(_) => None,
            Transport::Ud { ud, .. } => ud.with_link(|l| l.engine().stats()),
        }
    }

    /// The UD payload limit in bytes: the largest datagram (rdma-rpc's 12-byte UD
    /// header, the request head, path, metadata and message); `None` on RC and while
    /// no session is up.
    pub fn ud_datagram_limit(&self) -> Option<usize> {
        match &self.transport {
            Transport::Rc(_) => None,
            Transport::Ud { ud, .. } => ud.with_link(|l| l.engine().config().datagram),
        }
    }
}

// For `channel_stream.rs`: streams go on RC, and a UD channel's session says
// whether the server takes RC.
impl Channel {
    pub(crate) fn stream_rc(&mut self) -> &mut LinkChannel<RcLink> {
        match &mut self.transport {
            Transport::Rc(c) | Transport::Ud { rc: c, .. } => c,
        }
    }

    pub(crate) fn stream_ud(&self) -> Option<&LinkChannel<UdLink>> {
        match &self.transport {
            Transport::Rc(_) => None,
            Transport::Ud { ud, .. } => Some(ud),
        }
    }
}

// Here rather than in `endpoint.rs`, so that an endpoint stays plain settings that
// the transports read without importing the channel built from them.
impl Endpoint {
    /// Connects now: fails if the first dial does (address, refusal, timeout).
    /// Afterwards the channel dials again by itself whenever its connection breaks.
    pub async fn connect(&self) -> Result<Channel, Error> {
        let channel = Channel::lazy(self);
        let dialed = match &channel.transport {
            Transport::Rc(c) => c.dial_now().await,
            Transport::Ud { ud, .. } => ud.dial_now().await,
        };
        dialed.map_err(|s| Error::new(s.message().to_string()))?;
        Ok(channel)
    }

    /// A channel that dials on its first call, as tonic's: a server that is not up
    /// yet fails that call `UNAVAILABLE`, and a later call dials again.
    pub fn connect_lazy(&self) -> Channel {
        Channel::lazy(self)
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
            Transport::Ud { ud, rc } => {
                let (fits, accepts_rc) = ud
                    .with_link(|l| {
                        let room = l
                            .engine()
                            .config()
                            .body_room(call.path, call.metadata.encoded_len());
                        (call.message.encoded_len() <= room, l.accepts_rc())
                    })
                    .unwrap_or((true, false));
                if fits || !accepts_rc {
                    // Too big without RC: the engine fails it naming the UD limit.
                    return ud.call(call);
                }
                // Too big for a datagram: over RC, dialed on first need.
                ud.unreserve();
                let mut rc = rc.clone();
                Box::pin(async move {
                    ServiceExt::<OutgoingCall<M>>::ready(&mut rc).await?;
                    rc.call(call).await
                })
            }
        }
    }
}
