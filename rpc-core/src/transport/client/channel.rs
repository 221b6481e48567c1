//! [`LinkChannel`]: a `tower::Service` over one client connection of either
//! transport, and the guard that cancels a call whose caller went away.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use prost::Message;
use tokio::sync::oneshot;
use tower::Service;

use super::conn::Conn;
use super::link::Link;
use crate::client::{IncomingReply, OutgoingCall};
use crate::engine::CallHead;
use crate::server::BoxFuture;
use crate::status::Status;

/// Owned by all clones of a channel; closes the connection when the last goes.
struct Handle<L: Link> {
    conn: Arc<Conn<L>>,
}

impl<L: Link> Drop for Handle<L> {
    fn drop(&mut self) {
        let sig = &self.conn.sig;
        sig.closing.store(true, Ordering::Release);
        sig.shutdown.notify_one();
        let mut st = self.conn.lock();
        self.conn.fail(&mut st, Status::cancelled("channel closed"));
    }
}

/// A client connection over transport `L`: cheap to clone (clones share the
/// connection), many calls in flight, a `tower::Service` whose `poll_ready` reserves
/// room to send (a credit or window place, and a send slot).
pub(crate) struct LinkChannel<L: Link> {
    inner: Arc<Handle<L>>,
    /// This clone holds a reservation from `poll_ready`.
    reserved: bool,
}

impl<L: Link> Clone for LinkChannel<L> {
    fn clone(&self) -> Self {
        // A reservation belongs to the clone that made it (as tower's ConcurrencyLimit).
        LinkChannel {
            inner: self.inner.clone(),
            reserved: false,
        }
    }
}

impl<L: Link> std::fmt::Debug for LinkChannel<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("transport", &std::any::type_name::<L>())
            .field("reserved", &self.reserved)
            .finish()
    }
}

impl<L: Link> LinkChannel<L> {
    pub(crate) fn new(conn: Arc<Conn<L>>) -> Self {
        LinkChannel {
            inner: Arc::new(Handle { conn }),
            reserved: false,
        }
    }

    /// Reads the link's state (counters, limits).
    pub(crate) fn with_link<R>(&self, f: impl FnOnce(&L) -> R) -> R {
        f(&self.inner.conn.lock().link)
    }

    fn try_reserve(&mut self, conn: &Conn<L>) -> Option<Result<(), Status>> {
        let mut st = conn.lock();
        if let Some(s) = st.link.dead() {
            return Some(Err(s.clone()));
        }
        if st.link.reserve() {
            self.reserved = true;
            return Some(Ok(()));
        }
        None
    }

    /// Gives back this clone's reservation, if it holds one.
    pub(crate) fn unreserve(&mut self) {
        if std::mem::take(&mut self.reserved) {
            let conn = &self.inner.conn;
            conn.lock().link.unreserve();
            conn.sig.ready.wake_all();
        }
    }
}

impl<L: Link> Drop for LinkChannel<L> {
    fn drop(&mut self) {
        self.unreserve();
    }
}

impl<L: Link, M: Message + Send + 'static> Service<OutgoingCall<M>> for LinkChannel<L> {
    type Response = IncomingReply;
    type Error = Status;
    type Future = BoxFuture<IncomingReply>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        if self.reserved {
            return Poll::Ready(Ok(()));
        }
        let conn = self.inner.conn.clone();
        conn.sig.ready.poll_reserve(cx, || self.try_reserve(&conn))
    }

    fn call(&mut self, call: OutgoingCall<M>) -> Self::Future {
        if !std::mem::take(&mut self.reserved) {
            return Box::pin(async { Err(Status::internal("Channel::call without poll_ready")) });
        }
        let handle = self.inner.clone();
        let conn = &handle.conn;
        let head = CallHead {
            path: call.path,
            metadata: &call.metadata,
            timeout: call.timeout.or(conn.default_timeout),
        };
        let (tx, rx) = oneshot::channel();
        let started = conn.start(&mut conn.lock(), tx, head, &call.message);
        match started {
            Ok(id) => Box::pin(
                CallGuard {
                    handle,
                    id,
                    armed: true,
                }
                .wait(rx),
            ),
            Err(s) => Box::pin(async move { Err(s) }),
        }
    }
}

/// Cancels its call in the engine when dropped before the reply came.
struct CallGuard<L: Link> {
    /// Keeps the connection open while the call is in flight, even if every
    /// channel clone is gone.
    handle: Arc<Handle<L>>,
    id: u32,
    /// Until the reply came.
    armed: bool,
}

impl<L: Link> CallGuard<L> {
    async fn wait(
        mut self,
        rx: oneshot::Receiver<Result<IncomingReply, Status>>,
    ) -> Result<IncomingReply, Status> {
        // Deadlines are the engine's: it ends the call at its deadline.
        let r = rx.await;
        self.armed = false;
        r.unwrap_or_else(|_| Err(Status::unavailable("connection closed")))
    }
}

impl<L: Link> Drop for CallGuard<L> {
    fn drop(&mut self) {
        if self.armed {
            let conn = &self.handle.conn;
            conn.lock().link.cancel(&conn.sig, self.id);
        }
    }
}
