//! Streaming calls of one server connection: the client's messages as the handler
//! reads them ([`ServerInbound`]), and the writer that answers the call's `REQ`
//! with its headers and then sends the handler's messages ([`RcPeer::respond_stream`]).
//!
//! Client messages are copied out of their receive slot (the SRQ slot is reposted
//! at once: a slow handler never holds the server's shared receives); at most the
//! call's window of them waits here. Locks: the connection's, then a call's.
//!
//! A call with a deadline gets a timer task that wakes the engine then
//! ([`ServerStreams::handle_timeout`](crate::engine::ServerStreams::handle_timeout)
//! decides what expired): the call ends `DEADLINE_EXCEEDED` on the server's own
//! clock, so a producer stops at the deadline even when the client went silent
//! (a client that is still there resets the call at its own deadline first).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::handler::leave_inline;
use super::rc_peer::{RcPeer, RcPeerState};
use super::stream_inbound::InboundShared;
use crate::engine::wire::{self, Descriptor, STREAM_GRANT_AT};
use bytes::Bytes;
use rpc_transport::msg::PooledRegion;

use crate::engine::ServerStreamEvent;
use crate::metadata::MetadataMap;
use crate::payload::Payload;
use crate::server::{BoxMessage, ReplyBody, ServerReply};
use crate::status::Status;
use crate::stream::{BoxInbound, BoxMessageSource, InboundMessages, MessageSource};
use crate::transport::encode_ahead::encode_ahead;
use crate::transport::encode_off::{encode_off_worker, HAND_OFF_STREAM_ENCODING_FROM};
use crate::transport::lend_windows::Lent;
use crate::transport::lock;
use crate::transport::stream_batch::{Next, Staged};

impl RcPeer {
    /// The inbound half of a streaming call that just arrived.
    pub(super) fn open_inbound(self: &Arc<Self>, st: &mut RcPeerState, id: u32) -> BoxInbound {
        let shared = Arc::new(InboundShared::default());
        if let Some(at) = st.engine.streams().deadline(id) {
            let timer = tokio::spawn(end_at_deadline(Arc::downgrade(self), at));
            lock(&shared.0).deadline_timer = Some(timer.abort_handle());
        }
        st.streams.insert(id, shared.clone());
        Box::pin(ServerInbound {
            peer: self.clone(),
            id,
            shared,
            done: false,
            untaken: 0,
            ready: VecDeque::new(),
        })
    }

    /// Caps streaming call `id` at the server's `timeout` (`Server::timeout`),
    /// counted from now (its arrival): the whole call, messages and trailers
    /// included, not only its handler's answer, as tonic's timeout covers the
    /// response body. The call then ends `DEADLINE_EXCEEDED` at whichever
    /// deadline comes first, the client's or this one.
    pub(super) fn cap_stream_deadline(self: &Arc<Self>, id: u32, timeout: Option<Duration>) {
        let Some(t) = timeout else {
            return;
        };
        let mut st = lock(&self.state);
        if st.dead {
            return;
        }
        let Some(at) = st.engine.streams().cap_deadline(id, Instant::now(), t) else {
            return;
        };
        if let Some(shared) = st.streams.get(&id) {
            let timer = tokio::spawn(end_at_deadline(Arc::downgrade(self), at));
            if let Some(old) = lock(&shared.0).deadline_timer.replace(timer.abort_handle()) {
                old.abort();
            }
        }
    }

    /// Routes the engine's stream events: messages and ends to the handlers'
    /// inbound halves, "may send" to the writers; a reset stops the call's task
    /// (its producer is dropped).
    pub(super) fn route_stream_events(&self, st: &mut RcPeerState) {
        let mut writable = false;
        while let Some((id, ev)) = st.engine.poll_stream_event() {
            match ev {
                ServerStreamEvent::Message(m) => {
                    let RcPeerState {
                        engine, streams, ..
                    } = &mut *st;
                    let streams_e = engine.streams();
                    let kept = match streams.get(&id) {
                        Some(s) => s.push(m, || streams_e.poll_message_of(id)),
                        None => Err(m),
                    };
                    if let Err(m) = kept {
                        // Nobody reads: discarded, and their credit goes back.
                        let mut charge = wire::charge(m.len());
                        while let Some(m) = streams_e.poll_message_of(id) {
                            charge += wire::charge(m.len());
                        }
                        streams_e.taken(id, charge);
                    }
                }
                ServerStreamEvent::HalfClosed => {
                    if let Some(s) = st.streams.get(&id) {
                        s.end(Ok(()));
                    }
                }
                ServerStreamEvent::Writable => writable = true,
                ServerStreamEvent::Reset(status) => {
                    if let Some(s) = st.streams.remove(&id) {
                        s.close(Err(status));
                    }
                    if let Some(h) = st.running.remove(&id) {
                        h.abort();
                    }
                    writable = true;
                }
            }
        }
        Self::pump(st);
        if writable {
            self.slot_wait.notify_waiters();
        }
    }

    /// Answers a streaming call: the handler's failure as a trailers-only status;
    /// else its headers, then its messages (a one-message reply is a stream of one),
    /// then the stream's end as the trailers. Each message is pulled from the
    /// handler's source only once the call has the client's credit, a connection
    /// credit and a send slot.
    pub(super) async fn respond_stream(&self, id: u32, result: Result<ServerReply, Status>) {
        match result {
            Err(s) => {
                self.answer_stream(id, Err(s)).await;
            }
            Ok(reply) => {
                let (metadata, body, _) = reply.into_parts();
                let source: BoxMessageSource = match body {
                    ReplyBody::Stream(s) => s,
                    ReplyBody::Message(m) => Box::pin(OneMessage(Some(m))),
                };
                if self.answer_stream(id, Ok(&metadata)).await {
                    self.write_stream(id, source).await;
                }
            }
        }
        let mut st = lock(&self.state);
        st.running.remove(&id);
        if let Some(s) = st.streams.remove(&id) {
            // A handler task still reading hears that the call is over.
            s.close(Err(Status::cancelled(
                "the call has ended (the server sent its final status)",
            )));
        }
    }

    /// Answers a streaming call's `REQ` (waiting for a send slot if all are in
    /// flight); whether the call goes on.
    async fn answer_stream(&self, id: u32, r: Result<&MetadataMap, Status>) -> bool {
        loop {
            let notified = self.slot_wait.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = lock(&self.state);
                if st.dead {
                    return false;
                }
                if let Some(slot) = st.ring.acquire() {
                    let RcPeerState { engine, ring, .. } = &mut *st;
                    let answer = r.as_ref().map(|m| *m).map_err(Clone::clone);
                    let t = engine.respond_stream(id, answer, ring.buf(&slot));
                    st.post_or_release(slot, t);
                    let open = r.is_ok() && st.engine.streams().is_open(id);
                    self.route_stream_events(&mut st);
                    return open;
                }
            }
            notified.await;
        }
    }

    /// Sends the handler's messages, then its end as the trailers. Returns when the
    /// stream ended, or the call did (reset, refused, connection lost). Messages
    /// the source has ready together go as one batch frame; a lone one at once.
    async fn write_stream(&self, id: u32, source: BoxMessageSource) {
        if let Some(end) = self.write_messages(id, source).await {
            self.finish_stream(id, end);
        }
    }

    /// [`RcPeer::write_stream`]'s messages: the source's end (or error) once it
    /// ended, `None` once the call did.
    async fn write_messages(
        &self,
        id: u32,
        mut source: BoxMessageSource,
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
                && encode_ahead(lock(&self.state).engine.streams().len());
            let mut room = if ahead {
                None
            } else {
                Some(self.wait_sendable(id).await?)
            };
            let len = match next.take() {
                Some(len) => len,
                None => match poll_fn(|cx| source.as_mut().poll_message(cx)).await {
                    Some(Ok(len)) => len,
                    Some(Err(s)) => return Some(Err(s)),
                    None => return Some(Ok(MetadataMap::new())),
                },
            };
            if self.by_ref_above.is_some_and(|t| len > t) {
                // By reference: encoded once into a region the client reads; in
                // chunks if the pool cannot ever hold it (or over the max message,
                // which the engine refuses below). Ahead of the call's credit only
                // into room free now: a reader that takes nothing then keeps one
                // message of the pool, and never a place in its line.
                let mut region = ahead.then(|| self.response_region_now(len)).flatten();
                if region.is_none() {
                    if room.is_none() {
                        room = Some(self.wait_sendable(id).await?);
                    }
                    region = self.response_region(len).await.and_then(Result::ok);
                }
                if let Some(mut region) = region {
                    let out = &mut region.buf_mut()[..len];
                    if len >= HAND_OFF_STREAM_ENCODING_FROM {
                        // Not on the receive loop that may have started this call
                        // inline, and not holding this worker's other tasks.
                        leave_inline().await;
                        encode_off_worker(len, || source.as_mut().encode_current(out));
                    } else {
                        source.as_mut().encode_current(out);
                    }
                    // Waits for the call's credit (ahead, it may have none yet).
                    self.send_by_ref(id, region, len).await.then_some(())?;
                    after_by_ref = true;
                    continue;
                }
            }
            let Room { frame, credit, max } = match room {
                Some(room) => room,
                None => self.wait_sendable(id).await?,
            };
            if !Staged::fits(len, frame, max) {
                // Alone: in chunks, or refused by the engine (over the max).
                self.send_alone(id, len, &mut source).await.then_some(())?;
                continue;
            }
            let after =
                poll_fn(|cx| Poll::Ready(staged.pack(cx, &mut source, len, frame, credit, max)))
                    .await;
            self.send_staged(id, &staged).await.then_some(())?;
            match after {
                Next::Nothing => {}
                Next::Message(len) => next = Some(len),
                Next::End(r) => return Some(r),
            }
        }
    }

    /// The handler's stream ended: its final status goes as the trailers, after
    /// the messages sent.
    fn finish_stream(&self, id: u32, r: Result<MetadataMap, Status>) {
        let mut st = lock(&self.state);
        if !st.dead {
            st.engine.streams().finish(id, r);
            Self::pump(&mut st);
        }
    }

    /// Sends the source's current message (`len` bytes) alone, encoded straight
    /// into a send slot; `false` once the call is over here.
    async fn send_alone(&self, id: u32, len: usize, source: &mut BoxMessageSource) -> bool {
        loop {
            if self.wait_sendable(id).await.is_none() {
                return false;
            }
            let mut st = lock(&self.state);
            let sendable = !st.dead && st.engine.streams().can_send(id);
            let Some(slot) = sendable.then(|| st.ring.acquire()).flatten() else {
                continue; // another call took it first
            };
            let RcPeerState { engine, ring, .. } = &mut *st;
            let encode = |out: &mut [u8]| source.as_mut().encode_current(out);
            match engine.send_stream_message(id, len, encode, ring.buf(&slot)) {
                Ok(t) => {
                    if let Err(e) = st.ring.post(slot, t.len, t.imm) {
                        tracing::debug!(error = %e, "server post failed");
                        st.dead = true;
                    }
                }
                Err(_) => st.ring.release(slot),
            }
            self.route_stream_events(&mut st);
            return true;
        }
    }

    /// Sends a message of `len` bytes encoded into `region` by reference once the
    /// call and the connection let it: the region stays lent until the client's
    /// `RDONE`; `false` once the call is over here (the region is then free).
    async fn send_by_ref(&self, id: u32, region: PooledRegion, len: usize) -> bool {
        let mut region = Some(region);
        loop {
            if self.wait_sendable(id).await.is_none() {
                return false;
            }
            let notified = self.slot_wait.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = lock(&self.state);
                let sendable = !st.dead && st.engine.streams().can_send(id);
                let Some(slot) = sendable.then(|| st.ring.acquire()).flatten() else {
                    continue; // another call took it first
                };
                // Its window first (posted ahead of the frame that names it).
                match st.lend(region.take().expect("sent once"), len) {
                    Ok((rkey, lent)) => {
                        self.post_lent(&mut st, id, slot, rkey, lent, len);
                        return true;
                    }
                    // No window room: try again after a send completion.
                    Err(Some(r)) => {
                        st.ring.release(slot);
                        region = Some(r);
                    }
                    // The connection is over.
                    Err(None) => {
                        st.ring.release(slot);
                        return false;
                    }
                }
            }
            notified.await;
        }
    }

    /// Sends the descriptor of a message lent (its window bound) in `slot`.
    fn post_lent(
        &self,
        st: &mut RcPeerState,
        id: u32,
        slot: rpc_transport::msg::SendSlot,
        rkey: u32,
        lent: Lent,
        len: usize,
    ) {
        let desc = Descriptor {
            addr: lent.addr(),
            rkey,
            len: len as u32,
        };
        let RcPeerState { engine, ring, .. } = &mut *st;
        match engine.send_stream_message_by_ref(id, desc, ring.buf(&slot)) {
            Ok(t) => {
                // Lent before the frame leaves: its `RDONE` finds it.
                st.lend_message(lent);
                if let Err(e) = st.ring.post(slot, t.len, t.imm) {
                    tracing::debug!(error = %e, "server post failed");
                    st.dead = true;
                }
            }
            Err(_) => {
                st.unlend(lent);
                st.ring.release(slot);
            }
        }
        self.route_stream_events(st);
    }

    /// Sends what `staged` holds (one message as a plain `MSG`, several as a
    /// batch) once the call and the connection let it; `false` once the call is
    /// over here.
    async fn send_staged(&self, id: u32, staged: &Staged) -> bool {
        // Tried at once (one lock per batch when the call may send, as it usually
        // may right after its writer packed within its credit); else it waits for
        // credit or a slot and tries again.
        loop {
            if let Some(sent) = self.try_send_staged(id, staged) {
                return sent;
            }
            if self.wait_sendable(id).await.is_none() {
                return false;
            }
        }
    }

    /// [`RcPeer::send_staged`] now, under one lock: `None` if the call may not send
    /// yet or no slot is free.
    fn try_send_staged(&self, id: u32, staged: &Staged) -> Option<bool> {
        let mut st = lock(&self.state);
        if st.dead || !st.engine.streams().is_open(id) {
            return Some(false);
        }
        let sendable = st.engine.streams().can_send(id);
        let slot = sendable.then(|| st.ring.acquire()).flatten()?;
        let RcPeerState { engine, ring, .. } = &mut *st;
        let sent = match (staged.lone(), staged.batch()) {
            (Some(m), _) => {
                engine.send_stream_message(id, m.len(), |o| o.copy_from_slice(m), ring.buf(&slot))
            }
            (_, Some(b)) => engine.send_stream_batch(id, b, ring.buf(&slot)),
            _ => Err(Status::internal("nothing staged")),
        };
        match sent {
            Ok(t) => {
                if let Err(e) = st.ring.post(slot, t.len, t.imm) {
                    tracing::debug!(error = %e, "server post failed");
                    st.dead = true;
                }
            }
            Err(s) => {
                // Packed within the call's limits, so this is a bug: the call
                // ends with it rather than losing the messages silently.
                st.ring.release(slot);
                st.engine.streams().finish(id, Err(s));
            }
        }
        self.route_stream_events(&mut st);
        Some(true)
    }

    /// Waits until call `id` may send a message and a send slot is free: what its
    /// writer needs to pack a batch, read under the same lock; `None` once the
    /// call is over here.
    async fn wait_sendable(&self, id: u32) -> Option<Room> {
        loop {
            let notified = self.slot_wait.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = lock(&self.state);
                if st.dead || !st.engine.streams().is_open(id) {
                    return None;
                }
                let frame = st.engine.frame_size();
                let slot_free = st.ring.free_slots() > 0;
                let streams = st.engine.streams();
                if streams.can_send(id) && slot_free {
                    return Some(Room {
                        frame,
                        credit: streams.send_credit(id),
                        max: streams.max_send_message(),
                    });
                }
            }
            notified.await;
        }
    }
}

/// What a writer packs a batch within, read when its call could send: the frame
/// size, the call's credit (which only grows until this writer sends) and the
/// largest message the client takes.
struct Room {
    frame: usize,
    credit: i64,
    max: usize,
}

/// Sleeps until `at`, a call's deadline, then lets the engine end the calls of the
/// connection whose deadline passed (their handlers' tasks are stopped, their
/// producers dropped). Holds the connection weakly: a closed one is left alone.
async fn end_at_deadline(peer: Weak<RcPeer>, at: Instant) {
    tokio::time::sleep_until(at.into()).await;
    let Some(peer) = peer.upgrade() else {
        return;
    };
    let mut st = lock(&peer.state);
    if st.dead {
        return;
    }
    st.engine.streams().handle_timeout(Instant::now());
    peer.route_stream_events(&mut st);
    drop(st);
}

/// A reply of one message, as a stream.
struct OneMessage(Option<BoxMessage>);

impl MessageSource for OneMessage {
    fn poll_message(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<usize, Status>>> {
        Poll::Ready(self.0.as_ref().map(|m| Ok(m.encoded_len())))
    }

    fn encode_current(mut self: Pin<&mut Self>, out: &mut [u8]) {
        if let Some(m) = self.0.take() {
            m.encode_to(out);
        }
    }
}

/// The client's messages of a streaming call, as its handler reads them.
struct ServerInbound {
    peer: Arc<RcPeer>,
    id: u32,
    shared: Arc<InboundShared>,
    done: bool,
    /// Charges of messages taken and not yet handed to the engine: it hears of
    /// them once they make a grant, not at every message (one connection lock
    /// per grant).
    untaken: u64,
    /// Messages moved out of the shared queue together, read from here.
    ready: VecDeque<Bytes>,
}

impl ServerInbound {
    /// Hands the engine the charges taken (their grant goes out).
    fn give_back(&mut self, more: u64) {
        let n = std::mem::take(&mut self.untaken) + more;
        if n == 0 {
            return;
        }
        let mut c = lock(&self.peer.state);
        if !c.dead {
            c.engine.streams().taken(self.id, n);
            RcPeer::pump(&mut c);
        }
    }
}

impl InboundMessages for ServerInbound {
    fn poll_message(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Payload, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        if this.ready.is_empty() {
            // Everything queued at once: one lock per batch, not per message.
            std::mem::swap(&mut lock(&this.shared.0).messages, &mut this.ready);
        }
        if let Some(m) = self.ready.pop_front() {
            self.untaken += wire::charge(m.len());
            if self.untaken >= u64::from(STREAM_GRANT_AT) {
                self.give_back(0);
            }
            return Poll::Ready(Some(Ok(Payload::from_bytes(m))));
        }
        let mut st = lock(&self.shared.0);
        if !st.messages.is_empty() {
            // Arrived since the look above: read again.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match st.end.take() {
            Some(r) => {
                drop(st);
                self.done = true;
                match r {
                    Ok(()) => Poll::Ready(None),
                    Err(s) => Poll::Ready(Some(Err(s))),
                }
            }
            None => {
                st.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    fn trailers(self: Pin<&mut Self>) -> Option<MetadataMap> {
        None
    }
}

impl Drop for ServerInbound {
    fn drop(&mut self) {
        // Messages still here and those to come are discarded; their credits go
        // back, so the client keeps sending (and its half-close still arrives).
        let discarded: u64 = {
            let mut st = lock(&self.shared.0);
            st.dropped = true;
            std::mem::take(&mut st.messages)
                .iter()
                .chain(&self.ready)
                .map(|m| wire::charge(m.len()))
                .sum()
        };
        self.give_back(discarded);
    }
}
