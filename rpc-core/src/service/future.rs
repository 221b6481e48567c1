//! [`ResponseFuture`]: a wrapped service's future, or a status known before it ran.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::status::Status;

pin_project! {
    /// The future of a call through [`InterceptedService`](super::InterceptedService)
    /// or [`Routes`](super::Routes): the inner service's future, or the status that
    /// ended the call before it reached the inner service (an interceptor's refusal,
    /// an unknown service). Allocates nothing of its own.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Inner { #[pin] future: F },
        Ended { status: Option<Status> },
    }
}

impl<F> ResponseFuture<F> {
    /// The inner service's future.
    pub(crate) fn inner(future: F) -> Self {
        ResponseFuture {
            kind: Kind::Inner { future },
        }
    }

    /// A call that ends with `status` at once.
    pub(crate) fn ended(status: Status) -> Self {
        ResponseFuture {
            kind: Kind::Ended {
                status: Some(status),
            },
        }
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: From<Status>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future } => future.poll(cx),
            KindProj::Ended { status } => {
                let status = status.take().expect("polled after completion");
                Poll::Ready(Err(E::from(status)))
            }
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Inner { .. } => f.write_str("ResponseFuture::Inner"),
            Kind::Ended { status } => f
                .debug_tuple("ResponseFuture::Ended")
                .field(status)
                .finish(),
        }
    }
}
