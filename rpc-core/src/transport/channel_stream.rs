//! PLACEHOLDER, replaced at merge by the RC streaming transport (a file of the same
//! name on the engine's branch): lets generated clients of streaming methods over a
//! [`Channel`] compile while that transport is built. Every streaming call answers
//! `UNIMPLEMENTED`.

use std::future::Ready;
use std::task::{Context, Poll};

use tower::Service;

use super::Channel;
use crate::client::{IncomingStream, OutgoingStream};
use crate::status::Status;

impl Service<OutgoingStream> for Channel {
    type Response = IncomingStream;
    type Error = Status;
    type Future = Ready<Result<IncomingStream, Status>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _call: OutgoingStream) -> Self::Future {
        std::future::ready(Err(Status::unimplemented("streaming transport not built")))
    }
}
