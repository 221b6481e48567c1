//! Streaming calls on a [`Channel`]: `tower::Service<OutgoingStream>`.
//!
//! Streams travel on RC. A UD channel opens its RC connection for them on first
//! need (as for calls too big for a datagram); against a server that accepts no RC
//! connection, a streaming call fails `UNIMPLEMENTED`, saying why.

use std::task::{Context, Poll};

use tower::Service;

use crate::client::{IncomingStream, OutgoingStream};
use crate::server::BoxFuture;
use crate::status::Status;
use crate::transport::channel::StreamRoute;
use crate::transport::client::stream;
use crate::transport::Channel;

impl Service<OutgoingStream> for Channel {
    type Response = IncomingStream;
    type Error = Status;
    type Future = BoxFuture<IncomingStream>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        let rc = match self.stream_route() {
            StreamRoute::Rc(rc) => rc,
            StreamRoute::UdThenRc { ud, rc } => {
                // Whether the server takes RC is known once the UD session is up.
                match ud.poll_dialed(cx) {
                    Poll::Ready(Ok(())) => {}
                    other => return other,
                }
                if !ud.with_link(|l| l.accepts_rc()).unwrap_or(false) {
                    return Poll::Ready(Err(no_rc()));
                }
                rc
            }
            StreamRoute::Balanced(b) => return b.poll_ready_stream(cx),
        };
        Service::<crate::client::OutgoingCall<()>>::poll_ready(rc, cx)
    }

    fn call(&mut self, mut call: OutgoingStream) -> Self::Future {
        self.tag_user_agent(&mut call.metadata);
        let rc = match self.stream_route() {
            StreamRoute::Rc(rc) => rc,
            StreamRoute::UdThenRc { ud, rc } => {
                if !ud.with_link(|l| l.accepts_rc()).unwrap_or(false) {
                    return Box::pin(async { Err(no_rc()) });
                }
                rc
            }
            StreamRoute::Balanced(b) => return b.call_stream(call),
        };
        let Some((conn, handle)) = rc.take_reserved() else {
            return Box::pin(async { Err(Status::internal("Channel::call without poll_ready")) });
        };
        Box::pin(stream::start(conn, handle, call))
    }
}

fn no_rc() -> Status {
    Status::unimplemented(
        "streaming calls need an RC connection, and this server accepts only UD \
         (Server::accept_rc(false))",
    )
}
