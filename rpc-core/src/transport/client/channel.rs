//! [`LinkChannel`]: a `tower::Service` over one client connection of either
//! transport, and the guard that cancels a call whose caller went away.

use std::sync::Arc;
use std::task::{Context, Poll};

use prost::Message;
use rpc_transport::msg::PooledRegion;
use tokio::sync::oneshot;
use tower::{Service, ServiceExt};

use super::conn::Conn;
use super::conn::Dial;
use super::handle::Handle;
use super::link::Lend;
use super::reap::{reap_until_reply, ReplyReceiver};
use crate::client::{IncomingReply, OutgoingCall};
use crate::engine::CallHead;
use crate::server::{BoxFuture, EncodeMessage};
use crate::status::Status;
use crate::transport::encode_off::{encode_on_blocking_pool, HAND_OFF_REQUEST_ENCODING_FROM};
use crate::transport::endpoint::Endpoint;

/// A client channel over transport `L`: cheap to clone (clones share the
/// connection), many calls in flight, a `tower::Service` whose `poll_ready` reserves
/// room to send (a credit or window place, and a send slot) on the connection of the
/// moment, dialing a new one when it broke ([`Handle`]).
pub(crate) struct LinkChannel<L: Dial> {
    inner: Arc<Handle<L>>,
    /// The connection this clone holds a reservation on, from `poll_ready`.
    reserved: Option<Arc<Conn<L>>>,
    /// The connection this clone last reserved on: tried first, without asking the
    /// handle (a lock per call) while it stays usable.
    last: Option<Arc<Conn<L>>>,
}

impl<L: Dial> Clone for LinkChannel<L> {
    fn clone(&self) -> Self {
        // A reservation belongs to the clone that made it (as tower's ConcurrencyLimit).
        LinkChannel {
            inner: self.inner.clone(),
            reserved: None,
            last: self.last.clone(),
        }
    }
}

impl<L: Dial> std::fmt::Debug for LinkChannel<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("transport", &std::any::type_name::<L>())
            .field("reserved", &self.reserved.is_some())
            .finish()
    }
}

impl<L: Dial> LinkChannel<L> {
    /// A channel that dials on its first call (`Endpoint::connect_lazy`).
    pub(crate) fn lazy(endpoint: Endpoint) -> Self {
        LinkChannel {
            inner: Handle::lazy(endpoint),
            reserved: None,
            last: None,
        }
    }

    /// Dials now if no connection is up, and waits for the outcome.
    pub(crate) async fn dial_now(&self) -> Result<(), Status> {
        std::future::poll_fn(|cx| self.inner.poll_conn(cx).map_ok(|_| ())).await
    }

    /// Polls for a connection: dials if none is up.
    pub(crate) fn poll_dialed(&self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        self.inner.poll_conn(cx).map_ok(|_| ())
    }

    /// When the next dial may start, while the last one failed.
    pub(crate) fn retry_at(&self) -> Option<std::time::Instant> {
        self.inner.retry_at()
    }

    /// Reads the current connection's link (counters, limits); `None` while none is up.
    pub(crate) fn with_link<R>(&self, f: impl FnOnce(&L) -> R) -> Option<R> {
        self.inner.current().map(|c| f(&c.lock().link))
    }

    /// Reserves on `conn`: `None` while it has no room, `Err` if it died.
    fn try_reserve(&mut self, conn: &Arc<Conn<L>>) -> Option<Result<(), Status>> {
        if conn.draining() {
            return Some(Err(Status::unavailable(
                "the server is draining this connection",
            )));
        }
        let mut st = conn.lock();
        if let Some(s) = st.link.dead() {
            return Some(Err(s.clone()));
        }
        if st.link.reserve() {
            self.reserved = Some(conn.clone());
            return Some(Ok(()));
        }
        drop(st);
        // A reply's receive left for later holds a credit back: it comes now.
        if conn.flush_deferred_receive() && conn.lock().link.reserve() {
            self.reserved = Some(conn.clone());
            return Some(Ok(()));
        }
        // Room comes back with completions: someone must reap them.
        conn.driver_reaps();
        None
    }

    /// Takes this clone's reservation (made by `poll_ready`) for a call of its own
    /// kind (a streaming call): the connection and the handle that keeps it open.
    pub(crate) fn take_reserved(&mut self) -> Option<Reserved<L>> {
        self.reserved.take().map(|c| {
            c.driver_reaps();
            (c, self.inner.clone())
        })
    }

    /// Gives back this clone's reservation, if it holds one.
    pub(crate) fn unreserve(&mut self) {
        if let Some(conn) = self.reserved.take() {
            conn.lock().link.unreserve();
            conn.sig.ready.wake_all();
        }
    }
}

impl<L: Dial> Drop for LinkChannel<L> {
    fn drop(&mut self) {
        self.unreserve();
    }
}

impl<L: Dial, M: Message + Send + 'static> Service<OutgoingCall<M>> for LinkChannel<L> {
    type Response = IncomingReply;
    type Error = Status;
    type Future = BoxFuture<IncomingReply>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        if self.reserved.is_some() {
            return Poll::Ready(Ok(()));
        }
        loop {
            let conn = match self.last.take() {
                Some(conn) => conn,
                None => match self.inner.poll_conn(cx) {
                    Poll::Ready(Ok(conn)) => conn,
                    Poll::Ready(Err(s)) => return Poll::Ready(Err(s)),
                    Poll::Pending => return Poll::Pending,
                },
            };
            match conn.sig.ready.poll_reserve(cx, || self.try_reserve(&conn)) {
                // Died or draining: the handle lets it go and dials again.
                Poll::Ready(Err(_)) => continue,
                other => {
                    self.last = Some(conn);
                    return other;
                }
            }
        }
    }

    fn call(&mut self, call: OutgoingCall<M>) -> Self::Future {
        self.start(call, true)
    }
}

impl<L: Dial> LinkChannel<L> {
    /// Starts a reserved call; `retry` allows one transparent retry on the next
    /// connection if this one died before the request left. Once only: a connection
    /// that can never post (a device refusing the operation) must end the call with
    /// that error, not dial forever.
    fn start<M>(&mut self, call: OutgoingCall<M>, retry: bool) -> BoxFuture<IncomingReply>
    where
        M: Message + Send + 'static,
    {
        let Some(conn) = self.reserved.take() else {
            return Box::pin(async { Err(Status::internal("Channel::call without poll_ready")) });
        };
        // A body by reference needs a region of the connection's pool: taken now if
        // free and nobody waits, else awaited in line (the reservation is kept).
        // Read without the lock: a small call pays one comparison.
        let ticket = match conn.by_ref_above {
            Some(t) => match Message::encoded_len(&call.message) {
                len if len > t => {
                    // Its large `Bytes` lent where they lie, if it can: no region,
                    // no copy.
                    if let Some(g) = conn.in_place.as_ref().and_then(|p| {
                        p.gather(
                            &CallHead::new(call.path, &call.metadata, None),
                            &call.message,
                        )
                    }) {
                        return self.begin(conn, call, Some(Ok(Lend::InPlace(g))), retry);
                    }
                    let ticket = conn.lock().link.region_for(len);
                    ticket.map(|t| t.map(|ticket| (ticket, len)))
                }
                _ => None,
            },
            None => None,
        };
        let region = match ticket {
            None => None,
            Some(Err(s)) => {
                conn.lock().link.unreserve();
                conn.sig.ready.wake_all();
                return Box::pin(async move { Err(s) });
            }
            Some(Ok((mut ticket, len))) => match ticket.try_take() {
                Some(Ok(region)) if len >= HAND_OFF_REQUEST_ENCODING_FROM => {
                    let mut this = self.clone();
                    return Box::pin(async move {
                        let parked = Parked(Some(conn));
                        this.encode_then_begin(parked, call, Ok(region), len, retry)
                            .await
                    });
                }
                Some(r) => Some(r.map(|region| Lend::unencoded(region, len))),
                None => {
                    // Regions come back when their windows' invalidations are
                    // reaped (`lend_windows`): someone must reap them.
                    conn.driver_reaps();
                    let mut this = self.clone();
                    return Box::pin(async move {
                        let parked = Parked(Some(conn));
                        let region = ticket.await;
                        this.encode_then_begin(parked, call, region, len, retry)
                            .await
                    });
                }
            },
        };
        self.begin(conn, call, region, retry)
    }

    /// Starts a call whose body goes in `region`, once it came: a large body is
    /// encoded on the blocking pool first (`transport::encode_off`), so that the
    /// copy holds no other task of this worker; a smaller one by `Conn::start`.
    async fn encode_then_begin<M>(
        &mut self,
        mut parked: Parked<L>,
        call: OutgoingCall<M>,
        region: rpc_transport::Result<PooledRegion>,
        len: usize,
        retry: bool,
    ) -> Result<IncomingReply, Status>
    where
        M: Message + Send + 'static,
    {
        let (call, region) = match region {
            Ok(region) if len >= HAND_OFF_REQUEST_ENCODING_FROM => {
                // The reservation stays parked meanwhile: an error returns it.
                let (call, region) = encode_on_blocking_pool((call, region), move |(c, r)| {
                    c.message.encode_to(&mut r.buf_mut()[..len]);
                })
                .await?;
                let lend = Lend::Region {
                    region,
                    len,
                    encoded: true,
                };
                (call, Ok(lend))
            }
            r => (call, r.map(|region| Lend::unencoded(region, len))),
        };
        let conn = parked.0.take().expect("held until the body was ready");
        self.begin(conn, call, Some(region), retry).await
    }

    /// Starts the call on the reserved `conn` (with its body's region, or the
    /// error that kept it from one).
    fn begin<M>(
        &mut self,
        conn: Arc<Conn<L>>,
        call: OutgoingCall<M>,
        region: Option<rpc_transport::Result<Lend>>,
        retry: bool,
    ) -> BoxFuture<IncomingReply>
    where
        M: Message + Send + 'static,
    {
        let region = match region.transpose() {
            Ok(r) => r,
            Err(e) => {
                conn.lock().link.unreserve();
                conn.sig.ready.wake_all();
                let s = Status::unavailable(format!("no registered memory for the request: {e}"));
                return Box::pin(async move { Err(s) });
            }
        };
        let head = CallHead {
            path: call.path,
            metadata: &call.metadata,
            // As tonic: the channel's timeout caps every call; the smaller wins.
            timeout: match (call.timeout, conn.default_timeout) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        };
        let (tx, rx) = oneshot::channel();
        let started = conn.start(tx, head, &call.message, region);
        match started {
            Ok((id, alone)) => {
                let guard = CallGuard {
                    _handle: self.inner.clone(),
                    conn,
                    id,
                    armed: true,
                };
                boxed_in_place(move || guard.wait(rx, alone))
            }
            Err(_) if retry && !conn.usable() => {
                // The connection died before the request left (nothing was posted,
                // so the server never saw it): once more on the next connection.
                let mut again = self.clone();
                Box::pin(async move {
                    ServiceExt::<OutgoingCall<M>>::ready(&mut again).await?;
                    again.start(call, false).await
                })
            }
            Err(s) => Box::pin(async move { Err(s) }),
        }
    }
}

/// Boxes the future `make` builds, built in its box: `Box::pin(fut)` builds it on
/// the stack and copies it into the box (twice, measured: the reply wait's whole
/// state, hundreds of bytes, per call), since the allocation comes after it.
fn boxed_in_place<F>(make: impl FnOnce() -> F) -> BoxFuture<IncomingReply>
where
    F: std::future::Future<Output = Result<IncomingReply, Status>> + Send + 'static,
{
    let boxed: Box<F> = Box::write(Box::new_uninit(), make());
    Box::into_pin(boxed)
}

/// A reservation held while its call waits for a region; given back if the caller
/// goes away first.
struct Parked<L: Dial>(Option<Arc<Conn<L>>>);

impl<L: Dial> Drop for Parked<L> {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            conn.lock().link.unreserve();
            conn.sig.ready.wake_all();
        }
    }
}

/// A reservation taken out of a channel: the connection, and the handle that keeps
/// it open.
pub(crate) type Reserved<L> = (Arc<Conn<L>>, Arc<Handle<L>>);

/// Cancels its call in the engine when dropped before the reply came.
struct CallGuard<L: Dial> {
    /// Keeps the connection open while the call is in flight, even if every
    /// channel clone is gone.
    _handle: Arc<Handle<L>>,
    /// The connection the call is on.
    conn: Arc<Conn<L>>,
    id: u32,
    /// Until the reply came.
    armed: bool,
}

impl<L: Dial> CallGuard<L> {
    /// Waits for the reply; a call `alone` on its connection reaps it itself
    /// (`reap.rs`) while the completion mode spins.
    async fn wait(mut self, mut rx: ReplyReceiver, alone: bool) -> Result<IncomingReply, Status> {
        // Deadlines are the engine's: it ends the call at its deadline.
        if alone {
            if let Some(r) = reap_until_reply(&self.conn, &mut rx).await {
                self.armed = false;
                return r;
            }
        }
        let r = rx.await;
        self.armed = false;
        r.unwrap_or_else(|_| Err(Status::unavailable("connection closed")))
    }
}

impl<L: Dial> Drop for CallGuard<L> {
    fn drop(&mut self) {
        if self.armed {
            self.conn.lock().link.cancel(&self.conn.sig, self.id);
        }
    }
}
