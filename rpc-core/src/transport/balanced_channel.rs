//! A balancer of `Channel`s: how a balanced channel reserves on and calls through
//! the endpoint channel it picks (the picking is in `balance.rs`).

use std::task::{Context, Poll};
use std::time::Instant;

use prost::Message;
use tower::Service;

use super::balance::{Backend, Balanced};
use super::channel::Channel;
use super::endpoint::Endpoint;
use crate::client::{IncomingReply, IncomingStream, OutgoingCall, OutgoingStream};
use crate::server::BoxFuture;
use crate::status::Status;

impl Backend for Channel {
    fn lazy(endpoint: &Endpoint) -> Self {
        endpoint.connect_lazy()
    }

    fn retry_at(&self) -> Option<Instant> {
        Channel::retry_at(self)
    }
}

impl Balanced<Channel> {
    /// Reserves on one endpoint (see [`Balanced::poll_pick`]).
    pub(crate) fn poll_ready<M>(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>>
    where
        M: Message + Send + 'static,
    {
        self.poll_pick(cx, |channel, cx| channel.poll_ready_or_fail::<M>(cx))
    }

    /// [`Balanced::poll_ready`] for a streaming call: reserves what a stream needs
    /// on the endpoint picked.
    pub(crate) fn poll_ready_stream(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        self.poll_pick(cx, |channel, cx| {
            Service::<OutgoingStream>::poll_ready(channel, cx)
        })
    }

    /// Starts the call on the endpoint `poll_ready` reserved.
    pub(crate) fn call<M>(&mut self, call: OutgoingCall<M>) -> BoxFuture<IncomingReply>
    where
        M: Message + Send + 'static,
    {
        self.start(|channel| channel.call(call))
    }

    /// Opens the streaming call on the endpoint `poll_ready_stream` reserved. The
    /// endpoint's load counts the call until it is open (its messages then flow
    /// on that connection, whatever the balancer does).
    pub(crate) fn call_stream(&mut self, call: OutgoingStream) -> BoxFuture<IncomingStream> {
        self.start(|channel| Service::<OutgoingStream>::call(channel, call))
    }
}
