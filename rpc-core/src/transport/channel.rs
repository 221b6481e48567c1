//! `Channel`: the client handle, over an RC connection or a UD session.

use std::task::{Context, Poll};

use prost::Message;
use tower::Service;

use crate::client::{IncomingReply, OutgoingCall};
use crate::engine::ud::UdClientStats;
use crate::server::BoxFuture;
use crate::status::Status;
use crate::transport::endpoint::Endpoint;
use crate::transport::ud_client::UdChannel;
use crate::transport::{client, Error};

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
    inner: Flavour,
}

#[derive(Clone)]
enum Flavour {
    Rc(client::Channel),
    Ud(UdChannel),
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Flavour::Rc(c) => c.fmt(f),
            Flavour::Ud(_) => f.write_str("Channel(UD)"),
        }
    }
}

impl Channel {
    /// Connects to `rdma://host:port` (RC) or `rdma+ud://host:port` (UD).
    pub async fn connect(uri: impl Into<String>) -> Result<Channel, Error> {
        Endpoint::from_shared(uri)?.connect().await
    }

    pub(crate) fn rc(c: client::Channel) -> Channel {
        Channel {
            inner: Flavour::Rc(c),
        }
    }

    pub(crate) fn ud(c: UdChannel) -> Channel {
        Channel {
            inner: Flavour::Ud(c),
        }
    }

    /// The UD session's counters (retransmissions, dropped replies, ...); `None` on RC.
    pub fn ud_stats(&self) -> Option<UdClientStats> {
        match &self.inner {
            Flavour::Rc(_) => None,
            Flavour::Ud(c) => Some(c.stats()),
        }
    }

    /// The UD payload limit in bytes: the largest datagram (rdma-rpc's 12-byte UD
    /// header, the request head, path, metadata and message); `None` on RC.
    pub fn ud_datagram_limit(&self) -> Option<usize> {
        match &self.inner {
            Flavour::Rc(_) => None,
            Flavour::Ud(c) => Some(c.datagram()),
        }
    }
}

impl<M: Message + Send + 'static> Service<OutgoingCall<M>> for Channel {
    type Response = IncomingReply;
    type Error = Status;
    type Future = BoxFuture<IncomingReply>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        match &mut self.inner {
            Flavour::Rc(c) => Service::<OutgoingCall<M>>::poll_ready(c, cx),
            Flavour::Ud(c) => c.poll_ready(cx),
        }
    }

    fn call(&mut self, call: OutgoingCall<M>) -> Self::Future {
        match &mut self.inner {
            Flavour::Rc(c) => c.call(call),
            Flavour::Ud(c) => c.call(call),
        }
    }
}
