//! Streaming calls on the client's RC connection: the caller's side of each call
//! ([`StreamShared`], in `stream_shared.rs`), the task that pulls its request messages ([`write_stream`]),
//! and its response messages as the typed API reads them ([`ClientInbound`]).
//!
//! The driver routes the engine's events of a call (headers, message, writable,
//! end) to its [`StreamShared`]. Stream messages are copied out of their receive
//! slot (the slot is reposted at once, so a slow reader never holds the
//! connection's receives); at most the call's window of them waits here.
//! Locks are taken connection first, then a call's: a reader or writer never holds
//! its call's lock while it takes the connection's.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::oneshot;

use super::conn::Conn;
use super::handle::Handle;
use super::link::Link;
use super::rc::RcLink;
use super::stream_shared::StreamShared;
use crate::client::{IncomingStream, OutgoingStream};
use crate::engine::wire::{self, STREAM_GRANT_AT};
use crate::engine::{Arrived, CallHead, StreamEvent};
use crate::metadata::MetadataMap;
use crate::payload::Payload;
use crate::status::Status;
use crate::stream::{BoxMessageSource, InboundMessages, MessageBytes};
use crate::transport::encode_ahead::encode_ahead;
use crate::transport::encode_off::{encode_on_blocking_pool, HAND_OFF_STREAM_ENCODING_FROM};
use crate::transport::lock;
use crate::transport::stream_batch::{Next, Staged};
use rpc_transport::msg::{PooledRegion, SendSlot};

impl RcLink {
    /// Routes the engine's stream events to their calls.
    pub(super) fn route_stream_events(&mut self) {
        while let Some((id, ev)) = self.engine.poll_stream_event() {
            let ev = match ev {
                StreamEvent::Message(m) => {
                    let streams = self.engine.streams();
                    match self.streams.get(&id) {
                        Some(sh) => sh.on_messages(m, || streams.poll_message_of(id)),
                        None => while streams.poll_message_of(id).is_some() {},
                    }
                    continue;
                }
                ev => ev,
            };
            let end = matches!(ev, StreamEvent::End(_));
            if let Some(sh) = self.streams.get(&id) {
                sh.on_event(ev);
            }
            if end {
                self.streams.remove(&id);
            }
        }
    }

    /// Opens a streaming call on a reservation: its `REQ` goes now.
    fn start_stream(
        &mut self,
        now: Instant,
        head: &CallHead<'_>,
        shared: Arc<StreamShared>,
    ) -> Result<u32, Status> {
        self.promised.redeem();
        if let Some(s) = self.engine.dead() {
            return Err(s.clone());
        }
        let slot = self.ring.acquire().expect("reserved by poll_ready");
        let (id, t) = match self.engine.start_stream(now, head, self.ring.buf(&slot)) {
            Ok(x) => x,
            Err(s) => {
                self.ring.release(slot);
                return Err(s);
            }
        };
        self.streams.insert(id, shared);
        self.post(slot, t.len, t.imm)?;
        Ok(id)
    }

    /// Sends the source's current message of call `id` on a reservation.
    fn send_message(&mut self, id: u32, len: usize, source: &mut BoxMessageSource) {
        self.promised.redeem();
        if self.engine.dead().is_some() {
            return;
        }
        let slot = self.ring.acquire().expect("reserved");
        self.send_inline(id, len, slot, |out| source.as_mut().encode_current(out));
    }

    /// Sends call `id`'s message of `len` bytes, written by `encode` into `slot`
    /// (in chunks when it is larger).
    fn send_inline(&mut self, id: u32, len: usize, slot: SendSlot, encode: impl FnOnce(&mut [u8])) {
        match self
            .engine
            .send_stream_message(id, len, encode, self.ring.buf(&slot))
        {
            Ok(t) => {
                let _ = self.post(slot, t.len, t.imm);
            }
            Err(_) => self.ring.release(slot),
        }
        self.send_queued();
        self.route_stream_events();
    }

    /// Sends call `id`'s message of `len` bytes, encoded into `region`, by
    /// reference on a reservation: the region stays lent until the server's `RDONE`.
    fn send_message_by_ref(&mut self, id: u32, region: PooledRegion, len: usize) {
        self.promised.redeem();
        if self.engine.dead().is_some() {
            return;
        }
        let slot = self.ring.acquire().expect("reserved");
        // The window first, posted ahead of the frame that names it.
        let (desc, lent) = match self.lend(region, len) {
            Ok(Ok(x)) => x,
            Ok(Err(mut region)) => {
                // No window WR may be posted now: the message goes in chunks.
                let bytes = &region.buf_mut()[..len];
                return self.send_inline(id, len, slot, |out| out.copy_from_slice(bytes));
            }
            Err(_) => {
                self.ring.release(slot);
                return;
            }
        };
        match self
            .engine
            .send_stream_message_by_ref(id, desc, self.ring.buf(&slot))
        {
            Ok(t) => {
                // Lent before the frame leaves: its `RDONE` finds it.
                self.lend_message(lent);
                let _ = self.post(slot, t.len, t.imm);
            }
            Err(_) => {
                self.unlend(lent);
                self.ring.release(slot);
            }
        }
        self.send_queued();
        self.route_stream_events();
    }

    /// Sends what `staged` holds of call `id` (one message as a plain `MSG`,
    /// several as a batch) on a reservation.
    fn send_staged(&mut self, id: u32, staged: &Staged) {
        self.promised.redeem();
        if self.engine.dead().is_some() {
            return;
        }
        let slot = self.ring.acquire().expect("reserved");
        let out = self.ring.buf(&slot);
        let sent = match (staged.lone(), staged.batch()) {
            (Some(m), _) => {
                self.engine
                    .send_stream_message(id, m.len(), |o| o.copy_from_slice(m), out)
            }
            (_, Some(b)) => self.engine.send_stream_batch(id, b, out),
            _ => {
                self.engine.unreserve();
                Err(Status::internal("nothing staged"))
            }
        };
        match sent {
            Ok(t) => {
                let _ = self.post(slot, t.len, t.imm);
            }
            Err(s) => {
                // Packed within the call's limits, so this is a bug: the call ends
                // with it rather than losing the messages silently.
                self.ring.release(slot);
                self.engine.streams().reset(id, s);
            }
        }
        self.send_queued();
        self.route_stream_events();
    }

    /// Posts a frame now, or behind the requests held for the driver (a call's
    /// frames never overtake its `REQ`).
    fn post(&mut self, slot: SendSlot, len: usize, imm: u32) -> Result<(), Status> {
        if self.ring.holds() {
            self.ring.hold(slot, len, imm);
            return Ok(());
        }
        self.ring.post(slot, len, imm).map_err(|e| {
            let s = Status::unavailable(format!("post failed: {e}"));
            self.fail(s.clone());
            s
        })
    }

    /// Something a reader or writer did (took a message, ended its half, reset the
    /// call) may have queued frames: send them and deliver what it caused.
    fn after_stream_change(&mut self) {
        self.send_queued();
        self.route_stream_events();
    }
}

/// Starts a streaming call on the connection `conn` reserved for it.
pub(crate) async fn start(
    conn: Arc<Conn<RcLink>>,
    handle: Arc<Handle<RcLink>>,
    call: OutgoingStream,
) -> Result<IncomingStream, Status> {
    let OutgoingStream {
        path,
        metadata,
        timeout,
        messages,
        ..
    } = call;
    let timeout = match (timeout, conn.default_timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let shared = Arc::new(StreamShared::default());
    let (tx, rx) = oneshot::channel();
    lock(&shared.0).headers = Some(tx);
    let head = CallHead::new(path, &metadata, timeout);
    let id = {
        let mut st = conn.lock();
        let r = st.link.start_stream(Instant::now(), &head, shared.clone());
        conn.sig.ready.wake_all();
        r?
    };
    // The driver sleeps until the engine's next timer: this call's deadline may be
    // the earliest.
    if timeout.is_some() {
        conn.sig.kick.notify_one();
    }
    let writer = tokio::spawn(write_stream(conn.clone(), id, messages, shared.clone()));
    {
        let mut st = lock(&shared.0);
        if st.end.is_some() {
            writer.abort();
        } else {
            st.writer_task = Some(writer.abort_handle());
        }
    }
    let mut inbound = ClientInbound {
        conn,
        _handle: handle,
        id,
        shared,
        done: false,
        trailers: None,
        untaken: 0,
        ready: VecDeque::new(),
    };
    // Dropped before the headers came: `inbound`'s drop resets the call.
    let headers = rx
        .await
        .unwrap_or_else(|_| Err(Status::unavailable("connection closed")));
    match headers {
        Ok(metadata) => Ok(IncomingStream {
            metadata,
            messages: Box::pin(inbound),
        }),
        Err(s) => {
            inbound.done = true;
            Err(s)
        }
    }
}

/// Pulls call `id`'s request messages from `source` while the server grants room,
/// and sends each into a send slot; the source's end half-closes the call, its
/// error resets it. Stopped (and the source dropped) when the call ends.
async fn write_stream(
    conn: Arc<Conn<RcLink>>,
    id: u32,
    source: BoxMessageSource,
    shared: Arc<StreamShared>,
) {
    if let Some(end) = write_messages(&conn, id, source, &shared).await {
        end_source(&conn, id, end);
    }
}

/// [`write_stream`]'s messages: the source's end (or error) once it ended, `None`
/// once the call did.
async fn write_messages(
    conn: &Conn<RcLink>,
    id: u32,
    mut source: BoxMessageSource,
    shared: &StreamShared,
) -> Option<Result<MetadataMap, Status>> {
    let mut staged = Staged::default();
    let mut next: Option<usize> = None;
    // The last message went by reference.
    let mut after_by_ref = false;
    loop {
        // The call's credit first: a producer is not polled beyond its window,
        // but for one message a connection's lone stream encodes ahead
        // (`transport/encode_ahead.rs`).
        let ahead = std::mem::take(&mut after_by_ref)
            && encode_ahead(conn.lock().link.engine.streams().len());
        let mut room = if ahead {
            None
        } else {
            Some(wait_credit(conn, id, shared).await?)
        };
        let len = match next.take() {
            Some(len) => len,
            None => match poll_fn(|cx| source.as_mut().poll_message(cx)).await {
                Some(Ok(len)) => len,
                Some(Err(s)) => return Some(Err(s)),
                None => return Some(Ok(MetadataMap::new())),
            },
        };
        if conn.by_ref_above.is_some_and(|t| len > t) {
            // Ahead of the call's credit only into room free now: a reader that
            // takes nothing keeps one message of the pool, never a place in its
            // line (as the server's writer: `server/rc_stream.rs`).
            let mut region = ahead.then(|| lend_region_now(conn, len)).flatten();
            if region.is_none() {
                if room.is_none() {
                    room = Some(wait_credit(conn, id, shared).await?);
                }
                region = lend_region(conn, len).await;
            }
            if let Some(mut region) = region {
                if len >= HAND_OFF_STREAM_ENCODING_FROM {
                    // Moved to the blocking pool and back: the copy holds no other
                    // task of this worker (`transport/encode_off.rs`).
                    let encode = move |(s, r): &mut (BoxMessageSource, PooledRegion)| {
                        s.as_mut().encode_current(&mut r.buf_mut()[..len]);
                    };
                    match encode_on_blocking_pool((source, region), encode).await {
                        Ok(back) => (source, region) = back,
                        Err(s) => return Some(Err(s)),
                    }
                } else {
                    source.as_mut().encode_current(&mut region.buf_mut()[..len]);
                }
                if room.is_none() {
                    wait_credit(conn, id, shared).await?;
                }
                let send = |link: &mut RcLink| link.send_message_by_ref(id, region, len);
                reserve_and_send(conn, id, send).await.then_some(())?;
                after_by_ref = true;
                continue;
            }
        }
        let (frame, credit, max) = match room {
            Some(room) => room,
            None => wait_credit(conn, id, shared).await?,
        };
        // What else the source has ready now rides in the same frame.
        let batched = Staged::fits(len, frame, max);
        let after = if batched {
            poll_fn(|cx| Poll::Ready(staged.pack(cx, &mut source, len, frame, credit, max))).await
        } else {
            Next::Nothing
        };
        // Then a token and a send slot, shared with the connection's other calls.
        let sent = if batched {
            reserve_and_send(conn, id, |link| link.send_staged(id, &staged)).await
        } else {
            let send = |link: &mut RcLink| link.send_message(id, len, &mut source);
            reserve_and_send(conn, id, send).await
        };
        sent.then_some(())?;
        match after {
            Next::Nothing => {}
            Next::Message(len) => next = Some(len),
            Next::End(r) => return Some(r),
        }
    }
}

/// Waits until call `id` may send a message: the frame size, the call's credit
/// and the largest message the server takes, read under one lock (the credit
/// only grows until this writer sends, so packing within it is safe); `None` once
/// the call ended.
async fn wait_credit(
    conn: &Conn<RcLink>,
    id: u32,
    shared: &StreamShared,
) -> Option<(usize, i64, usize)> {
    poll_fn(|cx| {
        let mut st = conn.lock();
        let frame = st.link.engine.frame_size();
        let streams = st.link.engine.streams();
        if streams.ended(id) {
            return Poll::Ready(None);
        }
        if streams.can_send(id) {
            let credit = streams.send_credit(id);
            return Poll::Ready(Some((frame, credit, streams.max_send_message())));
        }
        // Registered under the connection's lock, which the `Writable` event is
        // routed under: a grant after the look above still wakes us.
        lock(&shared.0).writer = Some(cx.waker().clone());
        Poll::Pending
    })
    .await
}

/// A token and a send slot for call `id`, shared with the connection's other
/// calls, then `send` on them under the same lock (one lock per message, not
/// one to reserve and another to send); `false` once the call or the connection
/// ended (`send` is then dropped unrun).
async fn reserve_and_send(conn: &Conn<RcLink>, id: u32, send: impl FnOnce(&mut RcLink)) -> bool {
    let mut send = Some(send);
    let room = poll_fn(|cx| {
        conn.sig.ready.poll_reserve(cx, || {
            let mut st = conn.lock();
            if let Some(s) = st.link.dead() {
                return Some(Err(s.clone()));
            }
            if st.link.engine.streams().ended(id) {
                return Some(Err(Status::cancelled("the call ended")));
            }
            if !st.link.reserve() {
                return None;
            }
            if let Some(send) = send.take() {
                send(&mut st.link);
            }
            Some(Ok(()))
        })
    })
    .await;
    room.is_ok()
}

/// A region of the connection's pool for a message of `len` bytes by reference,
/// waiting in line while the pool has no room; `None` if it goes in chunks (no
/// RDMA Read, over the max message, larger than the whole pool).
async fn lend_region(conn: &Conn<RcLink>, len: usize) -> Option<PooledRegion> {
    let ticket = conn.lock().link.region_for(len)?.ok()?;
    ticket.await.ok()
}

/// [`lend_region`] only if the pool has room now and nobody waits in its line.
fn lend_region_now(conn: &Conn<RcLink>, len: usize) -> Option<PooledRegion> {
    let mut ticket = conn.lock().link.region_for(len)?.ok()?;
    ticket.try_take()?.ok()
}

/// The caller's source ended: its end half-closes the call, its error resets it.
fn end_source(conn: &Conn<RcLink>, id: u32, r: Result<MetadataMap, Status>) {
    let mut st = conn.lock();
    match r {
        Ok(_) => st.link.engine.streams().half_close(id),
        Err(s) => st.link.engine.streams().reset(id, s),
    }
    st.link.after_stream_change();
}

/// The response messages of a streaming call, as the caller reads them.
pub(crate) struct ClientInbound {
    conn: Arc<Conn<RcLink>>,
    /// Keeps the connection open while the call runs, even with no channel left.
    _handle: Arc<Handle<RcLink>>,
    id: u32,
    shared: Arc<StreamShared>,
    /// The end was read (or the call failed before its headers).
    done: bool,
    trailers: Option<MetadataMap>,
    /// Charges of messages taken and not yet handed to the engine: it hears of
    /// them once they make a grant (one connection lock per grant, not per
    /// message).
    untaken: u64,
    /// Messages moved out of the shared queue together, read from here (a batch
    /// is cut message by message as it is read).
    ready: VecDeque<Arrived>,
}

impl ClientInbound {
    /// Whether a message is here to read (what arrived is moved out of the
    /// shared queue all at once: one lock per wake-up, not per message).
    fn has_ready(&mut self) -> bool {
        for swapped in [false, true] {
            while let Some(a) = self.ready.front() {
                if a.left() > 0 {
                    return true;
                }
                self.ready.pop_front();
            }
            if !swapped {
                std::mem::swap(&mut lock(&self.shared.0).messages, &mut self.ready);
            }
        }
        false
    }

    /// A message of `len` bytes was read: its charge goes back to the server once
    /// they make a grant (one connection lock per grant, not per message).
    fn took(&mut self, len: usize) {
        self.untaken += wire::charge(len);
        if self.untaken >= u64::from(STREAM_GRANT_AT) {
            let n = std::mem::take(&mut self.untaken);
            let mut c = self.conn.lock();
            c.link.engine.streams().taken(self.id, n);
            c.link.after_stream_change();
        }
    }

    /// With nothing to read: the end (`None` for OK, its trailers kept), or
    /// `Pending` until more arrives.
    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Option<Status>> {
        let mut st = lock(&self.shared.0);
        if !st.messages.is_empty() {
            // Arrived since the look above: read again.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match st.end.take() {
            Some(end) => {
                drop(st);
                self.done = true;
                match end {
                    Ok(md) => {
                        self.trailers = Some(md);
                        Poll::Ready(None)
                    }
                    Err(s) => Poll::Ready(Some(s)),
                }
            }
            None => {
                st.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl InboundMessages for ClientInbound {
    fn poll_message(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Payload, Status>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if this.has_ready() {
            let m = this.ready.front_mut().and_then(Iterator::next);
            let m = m.expect("has_ready");
            this.took(m.len());
            return Poll::Ready(Some(Ok(Payload::from_bytes(m))));
        }
        this.poll_end(cx).map(|end| end.map(Err))
    }

    /// Messages are read where they arrived: a batch's from its one buffer.
    fn poll_message_in_place(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        read: &mut dyn FnMut(MessageBytes<'_>),
    ) -> Poll<Option<Result<(), Status>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if this.has_ready() {
            let arrived = this.ready.front_mut().expect("has_ready");
            let (buf, range) = arrived.next_in_place().expect("has_ready");
            let len = range.len();
            read(MessageBytes::Shared(buf, range));
            this.took(len);
            return Poll::Ready(Some(Ok(())));
        }
        this.poll_end(cx).map(|end| end.map(Err))
    }

    fn trailers(mut self: Pin<&mut Self>) -> Option<MetadataMap> {
        self.trailers.take()
    }
}

impl Drop for ClientInbound {
    fn drop(&mut self) {
        let ended = self.done || lock(&self.shared.0).end.is_some();
        if !ended {
            // The caller stopped reading: the call is over for it.
            let mut c = self.conn.lock();
            c.link.engine.streams().reset(
                self.id,
                Status::cancelled("the client dropped the response stream"),
            );
            c.link.after_stream_change();
        }
    }
}
