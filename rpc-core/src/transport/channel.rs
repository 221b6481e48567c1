//! `Channel`: the client handle, over an RC connection, a UD session, or several
//! endpoints balanced (`Channel::balance_list`, `Channel::balance_channel`).

use std::hash::Hash;
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use prost::Message;
use tower::{Service, ServiceExt};

use crate::client::{IncomingReply, OutgoingCall};
use crate::engine::ud::UdClientStats;
use crate::handshake::NO_UD;
use crate::metadata::{AsciiMetadataValue, MetadataMap};
use crate::server::BoxFuture;
use crate::status::Status;
use crate::transport::balance::Balanced;
use crate::transport::client::rc::RcLink;
use crate::transport::client::ud::UdLink;
use crate::transport::client::LinkChannel;
use crate::transport::limit::Limits;
use crate::transport::user_agent;
use crate::transport::Error;
use crate::WaitForReady;

pub use crate::transport::balance::Change;
pub use crate::transport::endpoint::Endpoint;

/// A client connection: cheap to clone (clones share it), many calls in flight, a
/// `tower::Service` whose `poll_ready` waits for room to send.
///
/// Over RC (`rdma://`), one reliable connected queue pair. Over UD (`rdma+ud://`, or
/// [`Endpoint::ud`]), one UD QP and a session at the server: each call is one
/// datagram each way, retransmitted on timeout and executed at most once by the
/// server; a call too big for a datagram goes over RC when the server accepts it,
/// else fails `RESOURCE_EXHAUSTED` naming the UD payload limit.
///
/// An [`Endpoint::concurrency_limit`] or [`Endpoint::rate_limit`] makes
/// `poll_ready` wait; a connection that cannot be made ends the call `UNAVAILABLE`
/// at once, unless the request asks to wait for it
/// ([`Request::set_wait_for_ready`](crate::Request::set_wait_for_ready)).
#[derive(Clone)]
pub struct Channel {
    transport: Transport,
    /// The endpoint's limits; `None` (the default) costs one branch.
    limits: Option<Box<Limits>>,
    /// `poll_ready` found that the channel cannot connect: the status `call` ends
    /// the call with, or waits out for a wait-for-ready call.
    not_ready: Option<Box<Status>>,
    /// The endpoint's `timeout`, which bounds a wait-for-ready call's wait.
    timeout: Option<Duration>,
    /// The endpoint's `user_agent`, put on every call (boxed: most have none).
    user_agent: Option<Box<AsciiMetadataValue>>,
}

#[derive(Clone)]
enum Transport {
    Rc(LinkChannel<RcLink>),
    Ud {
        ud: LinkChannel<UdLink>,
        /// The RC connection for calls too big for a datagram, dialed on first need
        /// and shared by the channel's clones.
        rc: LinkChannel<RcLink>,
        /// Why UD cannot work (this side's device or the server's has none), once
        /// a dial found out: every call goes over `rc` from then on. Shared by the
        /// clones, so the fallback is logged once.
        no_ud: Arc<OnceLock<String>>,
    },
    /// Boxed: a lone channel stays small.
    Balanced(Box<Balanced<Channel>>),
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.transport {
            Transport::Rc(c) => c.fmt(f),
            Transport::Ud { ud, .. } => ud.fmt(f),
            Transport::Balanced(b) => b.fmt(f),
        }
    }
}

impl Channel {
    /// Connects to `rdma://host:port` (RC) or `rdma+ud://host:port` (UD).
    pub async fn connect(uri: impl Into<String>) -> Result<Channel, Error> {
        Endpoint::from_shared(uri)?.connect().await
    }

    /// An [`Endpoint`] for a constant address, as tonic's `Channel::from_static`.
    ///
    /// # Panics
    /// If `s` is not an `rdma://host:port` or `rdma+ud://host:port` address.
    pub fn from_static(s: &'static str) -> Endpoint {
        Endpoint::from_static(s)
    }

    /// An [`Endpoint`] for an address built at run time, as tonic's
    /// `Channel::from_shared` (which takes bytes; this takes a string).
    pub fn from_shared(s: impl Into<String>) -> Result<Endpoint, Error> {
        Endpoint::from_shared(s)
    }

    /// A channel over `endpoint` that dials on its first call.
    fn lazy(endpoint: &Endpoint) -> Channel {
        let transport = if endpoint.settings.ud {
            let mut rc = endpoint.clone();
            rc.settings.ud = false;
            Transport::Ud {
                ud: LinkChannel::lazy(endpoint.clone()),
                rc: LinkChannel::lazy(rc),
                no_ud: Arc::default(),
            }
        } else {
            Transport::Rc(LinkChannel::lazy(endpoint.clone()))
        };
        Channel {
            transport,
            limits: Limits::of(&endpoint.settings),
            not_ready: None,
            timeout: endpoint.settings.timeout,
            user_agent: endpoint.settings.user_agent.clone().map(Box::new),
        }
    }

    /// A channel that balances calls over `list`, as tonic's: each call goes to the
    /// less loaded of two endpoints picked at random among those ready (power of two
    /// choices). Each endpoint connects lazily, with its own settings and limits; an
    /// endpoint that cannot connect is passed over while another can.
    pub fn balance_list(list: impl Iterator<Item = Endpoint>) -> Self {
        Channel::balanced(Balanced::list(list))
    }

    /// A balanced channel (as [`Channel::balance_list`]) whose endpoints come and go
    /// through the returned sender, as tonic's: [`Change::Insert`] adds one (dialed
    /// on first need), [`Change::Remove`] takes one out (its calls in flight finish;
    /// it gets no new ones). Changes are applied by the next call; while there is no
    /// endpoint, calls wait in `poll_ready`. `capacity` bounds the changes queued.
    pub fn balance_channel<K>(
        capacity: usize,
    ) -> (Self, tokio::sync::mpsc::Sender<Change<K, Endpoint>>)
    where
        K: Hash + Eq + Send + Clone + 'static,
    {
        let (balanced, tx) = Balanced::channel(capacity);
        (Channel::balanced(balanced), tx)
    }

    fn balanced(balanced: Balanced<Channel>) -> Channel {
        Channel {
            transport: Transport::Balanced(Box::new(balanced)),
            limits: None,
            not_ready: None,
            timeout: None,
            user_agent: None,
        }
    }

    /// Ready to send, or why not: waits for the endpoint's limits, then for room on
    /// the connection; `Err` while the channel cannot connect.
    pub(crate) fn poll_ready_or_fail<M: Message + Send + 'static>(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Status>> {
        if let Some(limits) = &mut self.limits {
            ready!(limits.poll_ready(cx));
        }
        match &mut self.transport {
            Transport::Rc(c) => Service::<OutgoingCall<M>>::poll_ready(c, cx),
            Transport::Ud { ud, rc, no_ud } => {
                if no_ud.get().is_none() {
                    match ready!(Service::<OutgoingCall<M>>::poll_ready(ud, cx)) {
                        Err(s) if s.message().contains(NO_UD) => fall_back_to_rc(no_ud, &s),
                        r => return Poll::Ready(r),
                    }
                }
                poll_ready_fallen_back::<M>(rc, no_ud, cx)
            }
            Transport::Balanced(b) => b.poll_ready::<M>(cx),
        }
    }

    /// When the channel will dial again after a failed dial.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        match &self.transport {
            Transport::Rc(c) => c.retry_at(),
            Transport::Ud { ud, .. } => ud.retry_at(),
            Transport::Balanced(b) => b.retry_at(),
        }
    }

    /// A wait-for-ready call on a channel that could not connect: waits (dialing
    /// again as the backoff allows) until the channel is ready or the call's
    /// deadline passes, then starts it with the time left.
    async fn wait_then_call<M: Message + Send + 'static>(
        mut self,
        mut call: OutgoingCall<M>,
    ) -> Result<IncomingReply, Status> {
        let timeout = match (call.timeout, self.timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let wait = async {
            loop {
                match std::future::poll_fn(|cx| self.poll_ready_or_fail::<M>(cx)).await {
                    Ok(()) => return,
                    Err(_) => {
                        // Until the backoff lets the channel dial again.
                        let retry = self
                            .retry_at()
                            .map(tokio::time::Instant::from_std)
                            .unwrap_or_else(|| {
                                tokio::time::Instant::now() + Duration::from_millis(10)
                            });
                        tokio::time::sleep_until(retry).await;
                    }
                }
            }
        };
        if let Some(deadline) = deadline {
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                return Err(Status::deadline_exceeded(format!(
                    "deadline of {:?} passed while waiting for the channel to connect \
                     (wait-for-ready)",
                    timeout.unwrap_or_default()
                )));
            }
            call.timeout = Some(deadline.saturating_duration_since(tokio::time::Instant::now()));
        } else {
            wait.await;
        }
        Service::<OutgoingCall<M>>::call(&mut self, call).await
    }

    /// The UD session's counters (retransmissions, dropped replies, ...); `None` on RC
    /// and while no session is up.
    pub fn ud_stats(&self) -> Option<UdClientStats> {
        match &self.transport {
            Transport::Rc(_) | Transport::Balanced(_) => None,
            Transport::Ud { ud, .. } => ud.with_link(|l| l.engine().stats()),
        }
    }

    /// The UD payload limit in bytes: the largest datagram (rdma-rpc's 12-byte UD
    /// header, the request head, path, metadata and message); `None` on RC and while
    /// no session is up.
    pub fn ud_datagram_limit(&self) -> Option<usize> {
        match &self.transport {
            Transport::Rc(_) | Transport::Balanced(_) => None,
            Transport::Ud { ud, .. } => ud.with_link(|l| l.engine().config().datagram),
        }
    }
}

/// Where a streaming call goes (for `channel_stream.rs`): streams go on RC; a UD
/// channel's session says whether the server takes RC; a balanced channel picks
/// an endpoint first.
pub(crate) enum StreamRoute<'a> {
    Rc(&'a mut LinkChannel<RcLink>),
    UdThenRc {
        ud: &'a LinkChannel<UdLink>,
        rc: &'a mut LinkChannel<RcLink>,
    },
    Balanced(&'a mut Balanced<Channel>),
}

impl Channel {
    /// Puts the endpoint's `user_agent`, if set, on a call's `metadata` (unary and
    /// streaming calls alike).
    pub(crate) fn tag_user_agent(&self, metadata: &mut MetadataMap) {
        if let Some(ua) = &self.user_agent {
            user_agent::tag(metadata, ua);
        }
    }

    pub(crate) fn stream_route(&mut self) -> StreamRoute<'_> {
        match &mut self.transport {
            Transport::Rc(c) => StreamRoute::Rc(c),
            Transport::Ud { ud, rc, no_ud } => {
                if no_ud.get().is_some() {
                    StreamRoute::Rc(rc)
                } else {
                    StreamRoute::UdThenRc { ud, rc }
                }
            }
            Transport::Balanced(b) => StreamRoute::Balanced(b),
        }
    }
}

// Here rather than in `endpoint.rs`, so that an endpoint stays plain settings that
// the transports read without importing the channel built from them.
impl Endpoint {
    /// Connects now: fails if the first dial does (address, refusal, timeout).
    /// Afterwards the channel dials again by itself whenever its connection breaks.
    pub async fn connect(&self) -> Result<Channel, Error> {
        self.check_uri()?;
        let channel = Channel::lazy(self);
        let dialed = match &channel.transport {
            Transport::Rc(c) => c.dial_now().await,
            Transport::Ud { ud, rc, no_ud } => match ud.dial_now().await {
                Err(s) if s.message().contains(NO_UD) => {
                    fall_back_to_rc(no_ud, &s);
                    rc.dial_now().await.map_err(|e| fallen_back(no_ud, e))
                }
                r => r,
            },
            Transport::Balanced(_) => unreachable!("Channel::lazy is never balanced"),
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

    /// Waits for the endpoint's limits and for room to send. Never fails: when the
    /// channel cannot connect, `call` ends the call `UNAVAILABLE` (or, for a
    /// wait-for-ready call, waits for the connection until its deadline).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        // A failure seen by an earlier poll is looked at again: the channel may be
        // able to connect by now.
        self.not_ready = None;
        match ready!(self.poll_ready_or_fail::<M>(cx)) {
            Ok(()) => Poll::Ready(Ok(())),
            Err(s) => {
                self.not_ready = Some(Box::new(s));
                Poll::Ready(Ok(()))
            }
        }
    }

    fn call(&mut self, mut call: OutgoingCall<M>) -> Self::Future {
        self.tag_user_agent(&mut call.metadata);
        if let Some(status) = self.not_ready.take() {
            // A permit taken before the connection failed goes back now.
            drop(self.limits.as_mut().and_then(|l| l.start_call()));
            if call.extensions.get::<WaitForReady>().is_none() {
                return Box::pin(async move { Err(*status) });
            }
            return Box::pin(self.clone().wait_then_call(call));
        }
        if let Some(limits) = &mut self.limits {
            if let Some(permit) = limits.start_call() {
                let reply = self.call_transport(call);
                return Box::pin(async move {
                    let _permit = permit;
                    reply.await
                });
            }
        }
        self.call_transport(call)
    }
}

impl Channel {
    fn call_transport<M: Message + Send + 'static>(
        &mut self,
        call: OutgoingCall<M>,
    ) -> BoxFuture<IncomingReply> {
        match &mut self.transport {
            Transport::Balanced(b) => b.call(call),
            Transport::Rc(c) => c.call(call),
            Transport::Ud { rc, no_ud, .. } if no_ud.get().is_some() => rc.call(call),
            Transport::Ud { ud, rc, .. } => {
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

/// A UD channel whose dial found no UD (`status`, naming the device) connects over
/// RC from now on: said once, at info, for the channel and its clones.
fn fall_back_to_rc(no_ud: &OnceLock<String>, status: &Status) {
    if no_ud.set(status.message().to_string()).is_ok() {
        tracing::info!(
            reason = status.message(),
            "rdma+ud:// connects over RC instead: no UD on this path"
        );
    }
}

/// `rc`'s readiness, its failures saying why the channel is on RC (a server that
/// takes no RC connections then reads as the reason the call cannot go anywhere).
fn poll_ready_fallen_back<M: Message + Send + 'static>(
    rc: &mut LinkChannel<RcLink>,
    no_ud: &OnceLock<String>,
    cx: &mut Context<'_>,
) -> Poll<Result<(), Status>> {
    Service::<OutgoingCall<M>>::poll_ready(rc, cx).map_err(|e| fallen_back(no_ud, e))
}

fn fallen_back(no_ud: &OnceLock<String>, e: Status) -> Status {
    let why = no_ud.get().map_or("", String::as_str);
    Status::new(
        e.code(),
        format!("{why}, so rdma+ud:// fell back to RC: {}", e.message()),
    )
}
