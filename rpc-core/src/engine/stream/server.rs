//! The server's streaming calls on one connection: their states, message credits,
//! deadlines, and the connection credits the client granted for frames that answer
//! nothing.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::by_ref::ByRef;
use super::{write_message, Incoming, Outgoing, Received, SendCredit, Window};
use crate::engine::codec::{self, StatusCuts};
use crate::engine::rendezvous::ReadOp;
use crate::engine::wire::{self, Descriptor, Kind, SERVER_CREDITS, STREAM_WINDOW};
use crate::engine::Transmit;
use crate::id_map::IdMap;
use crate::metadata::MetadataMap;
use crate::status::Status;

/// What happened to a streaming call, for its handler (drained with
/// [`ServerStreams::poll_event`]).
#[derive(Debug)]
pub enum ServerStreamEvent {
    /// A whole message from the client.
    Message(bytes::Bytes),
    /// The client's half ended (`HALF_CLOSE`).
    HalfClosed,
    /// The call may send a message again (credit came back, a long message left).
    Writable,
    /// The call ended from the client's side or by a refusal here: the handler's
    /// inbound ends with this status and its producer is dropped. Last event.
    Reset(Status),
}

#[derive(Debug)]
struct Stream {
    /// The `REQ`'s answer (headers, or a status) is still to go.
    unanswered: bool,
    /// Ended: `TRAILERS` queued or sent, or reset. The entry stays until queued
    /// frames are out.
    open: bool,
    /// The client's half ended.
    half_closed: bool,
    send_credit: SendCredit,
    sending: Option<Outgoing>,
    /// The final status to send once the long message in progress is out.
    trailers: Option<Result<MetadataMap, Status>>,
    grant: u32,
    recv: Incoming,
    window: Window,
    /// When the call ends here `DEADLINE_EXCEEDED`, and the timeout it came from.
    deadline: Option<(Instant, Duration)>,
    /// The client half-closed while messages by reference before it were still
    /// being read: the handler hears so once they are delivered.
    deferred_half_close: bool,
}

impl Stream {
    fn has_work(&self) -> bool {
        self.sending.is_some() || self.trailers.is_some() || (self.open && self.grant > 0)
    }
}

/// The streaming calls of one server connection. [`crate::engine::ServerConn`]
/// owns it and hands it the frames of streaming calls.
#[derive(Debug)]
pub struct ServerStreams {
    max_recv_message: usize,
    max_send_message: usize,
    streams: IdMap<u32, Stream>,
    /// Frames that answer nothing the client has receives for.
    credits: u32,
    transmit: VecDeque<u32>,
    /// `REQ`s of calls that ended before their handler answered: answered now with
    /// the call's status (answers need no connection credit).
    answers: VecDeque<(u32, Status)>,
    events: VecDeque<(u32, ServerStreamEvent)>,
    /// Messages by reference, both ways.
    by_ref: ByRef,
    /// Both sides agreed on RDMA Read: a message by reference may be read here.
    by_ref_agreed: bool,
    /// The window each call grants the client (see [`Window::new`]).
    window: u32,
    pub(crate) malformed: u64,
}

impl ServerStreams {
    pub(crate) fn new(max_recv_message: usize, max_send_message: usize) -> Self {
        ServerStreams {
            max_recv_message,
            max_send_message,
            streams: IdMap::default(),
            // None until the client posts their receives (its first stream).
            credits: 0,
            transmit: VecDeque::new(),
            answers: VecDeque::new(),
            events: VecDeque::new(),
            by_ref: ByRef::default(),
            by_ref_agreed: false,
            window: STREAM_WINDOW,
            malformed: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.streams.len()
    }

    pub(crate) fn contains(&self, id: u32) -> bool {
        self.streams.contains_key(&id)
    }

    /// Connection credits left (frames that answer nothing it may still send).
    pub fn credits(&self) -> u32 {
        self.credits
    }

    /// A streaming `REQ` arrived at `now`: the call is open, until `timeout` (the
    /// client's, from the `REQ`) if any.
    pub(crate) fn open(&mut self, id: u32, now: Instant, timeout: Option<Duration>) {
        let deadline = timeout.and_then(|t| Some((now.checked_add(t)?, t)));
        let window = Window::new(self.window);
        // The window beyond the wire's at open goes at once (the client knows the
        // call), as soon as the connection has a credit for it.
        let grant = window.beyond_open();
        self.streams.insert(
            id,
            Stream {
                unanswered: true,
                open: true,
                half_closed: false,
                send_credit: SendCredit::default(),
                sending: None,
                trailers: None,
                grant,
                recv: Incoming::default(),
                window,
                deadline,
                deferred_half_close: false,
            },
        );
        if grant > 0 {
            self.queue(id);
        }
    }

    /// Brings call `id`'s deadline here forward to `now + timeout` (the server's
    /// own cap on a call, `Server::timeout`) if that comes first; the new
    /// deadline when it did.
    pub fn cap_deadline(&mut self, id: u32, now: Instant, timeout: Duration) -> Option<Instant> {
        let s = self.streams.get_mut(&id).filter(|s| s.open)?;
        let at = now.checked_add(timeout)?;
        if s.deadline.is_some_and(|(d, _)| d <= at) {
            return None;
        }
        s.deadline = Some((at, timeout));
        Some(at)
    }

    /// When call `id` ends here at its deadline, if it is open and has one.
    pub fn deadline(&self, id: u32) -> Option<Instant> {
        self.streams
            .get(&id)
            .filter(|s| s.open)
            .and_then(|s| s.deadline)
            .map(|(at, _)| at)
    }

    /// The earliest deadline of an open call: [`ServerStreams::handle_timeout`] is
    /// due then. (A scan: deadlines live in the calls, so a call that ends leaves
    /// nothing behind, however long its deadline.)
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.streams
            .values()
            .filter(|s| s.open)
            .filter_map(|s| s.deadline.map(|(at, _)| at))
            .min()
    }

    /// Ends the open calls whose deadline passed by `now` on this side, whatever the
    /// client does (it may be gone without a word): `DEADLINE_EXCEEDED` goes to the
    /// client (as the `REQ`'s answer if the handler has not answered yet, else as
    /// `TRAILERS`, dropping the rest of a long message), and to the handler as a
    /// [`ServerStreamEvent::Reset`] (its producer is dropped).
    pub fn handle_timeout(&mut self, now: Instant) {
        let expired: Vec<(u32, Duration)> = self
            .streams
            .iter()
            .filter(|(_, s)| s.open)
            .filter_map(|(id, s)| match s.deadline {
                Some((at, t)) if at <= now => Some((*id, t)),
                _ => None,
            })
            .collect();
        for (id, t) in expired {
            self.refuse(
                id,
                Status::deadline_exceeded(format!("deadline of {t:?} exceeded on the server")),
            );
        }
    }

    /// Answers the call's `REQ`: with its response headers (the call goes on), or a
    /// status (trailers-only: the call ends). `None` if the call is gone or was
    /// answered.
    pub(crate) fn respond(
        &mut self,
        id: u32,
        result: Result<&MetadataMap, Status>,
        out: &mut [u8],
        cuts: &mut StatusCuts,
    ) -> Option<Transmit> {
        let s = self.streams.get_mut(&id).filter(|s| s.unanswered)?;
        s.unanswered = false;
        let t = |len| Transmit {
            len,
            imm: wire::imm(Kind::Resp, id),
        };
        let md = match result {
            Ok(md) if s.open => md,
            Ok(_) => {
                // Ended meanwhile (reset, or refused here): the REQ still needs its
                // answer, which is then the call's status.
                let st = match s.trailers.take() {
                    Some(Err(st)) => st,
                    _ => Status::cancelled("the client reset the call"),
                };
                let f = codec::write_status(&st, None, out, cuts);
                self.maybe_forget(id);
                return Some(t(f.len));
            }
            Err(st) => {
                let f = codec::write_status(&st, None, out, cuts);
                s.open = false;
                self.maybe_forget(id);
                return Some(t(f.len));
            }
        };
        match codec::write_response(md, 0, out) {
            Ok(len) => {
                wire::set_response_stream(out);
                Some(t(len))
            }
            Err(st) => {
                let f = codec::write_status(&st, None, out, cuts);
                s.open = false;
                self.events.push_back((id, ServerStreamEvent::Reset(st)));
                self.maybe_forget(id);
                Some(t(f.len))
            }
        }
    }

    /// Whether call `id` may send a message now: answered with headers, open, credit
    /// from the client, no long message going out, and a connection credit.
    pub fn can_send(&self, id: u32) -> bool {
        self.credits > 0
            && self.streams.get(&id).is_some_and(|s| {
                s.open && !s.unanswered && s.send_credit.open() && s.sending.is_none()
            })
    }

    /// Whether call `id` still runs here.
    pub fn is_open(&self, id: u32) -> bool {
        self.streams.get(&id).is_some_and(|s| s.open)
    }

    /// Sends a message of `len` bytes, written by `encode`, into `out` (a free send
    /// slot): its first (or only) `MSG`, taking a connection credit. A message over
    /// the max message ends the call `RESOURCE_EXHAUSTED` (returned, and sent to the
    /// client as its trailers).
    pub(crate) fn send_message(
        &mut self,
        id: u32,
        len: usize,
        encode: impl FnOnce(&mut [u8]),
        out: &mut [u8],
    ) -> Result<Transmit, Status> {
        if !self.can_send(id) {
            return Err(Status::failed_precondition("stream cannot send now"));
        }
        if len > self.max_send_message {
            let st = Status::resource_exhausted(format!(
                "stream message of {len} bytes exceeds the limit of {}",
                self.max_send_message
            ));
            self.finish(id, Err(st.clone()));
            self.events
                .push_back((id, ServerStreamEvent::Reset(st.clone())));
            return Err(st);
        }
        let s = self.streams.get_mut(&id).expect("can_send");
        let (n, rest) = write_message(len, encode, out);
        s.send_credit.spend(len);
        self.credits -= 1;
        if rest.is_some() {
            s.sending = rest;
            self.queue(id);
        }
        Ok(Transmit {
            len: n,
            imm: wire::imm(Kind::Msg, id),
        })
    }

    /// Sends a message by reference into `out` (a free send slot), taking a
    /// connection credit: the driver encoded its `desc.len` bytes into a region it
    /// lends at `desc` until [`ServerStreams::poll_released`] names the address (or
    /// the connection ends). On error nothing is sent and the region is free (a
    /// message over the max message ends the call, as
    /// [`ServerStreams::send_message`]).
    pub(crate) fn send_message_by_ref(
        &mut self,
        id: u32,
        desc: Descriptor,
        out: &mut [u8],
    ) -> Result<Transmit, Status> {
        let len = desc.len as usize;
        if !self.can_send(id) {
            return Err(Status::failed_precondition("stream cannot send now"));
        }
        if len > self.max_send_message {
            let st = Status::resource_exhausted(format!(
                "stream message of {len} bytes exceeds the limit of {}",
                self.max_send_message
            ));
            self.finish(id, Err(st.clone()));
            self.events
                .push_back((id, ServerStreamEvent::Reset(st.clone())));
            return Err(st);
        }
        let s = self.streams.get_mut(&id).expect("can_send");
        s.send_credit.spend(len);
        self.credits -= 1;
        self.by_ref.lend(id, desc.addr);
        Ok(Transmit {
            len: wire::write_msg_by_ref(out, &desc),
            imm: wire::imm(Kind::Msg, id),
        })
    }

    /// Both sides agreed on RDMA Read: messages by reference are read, not refused
    /// as malformed.
    pub(crate) fn agree_by_ref(&mut self) {
        self.by_ref_agreed = true;
    }

    /// Each later call lets the client send up to `size` bytes of messages ahead
    /// of its handler (see [`Window::new`]).
    pub(crate) fn set_window(&mut self, size: u32) {
        self.window = size;
    }

    /// The next stream message to read by RDMA Read (then
    /// [`ServerStreams::handle_read_done`] under its tag).
    pub(crate) fn poll_read(&mut self) -> Option<ReadOp> {
        self.by_ref.poll_read()
    }

    /// The next address of a stream message lent to the client that it is done with.
    pub fn poll_released(&mut self) -> Option<u64> {
        self.by_ref.poll_released()
    }

    /// Whether reads to start or lent regions to free wait for the driver.
    pub(crate) fn by_ref_pending(&self) -> bool {
        self.by_ref.pending()
    }

    /// Stream messages lent to the client and not yet released.
    pub fn lent_messages(&self) -> usize {
        self.by_ref.lent()
    }

    /// The client's `RDONE` of a stream message (call id 0, the address); `false`
    /// if malformed or naming nothing lent.
    pub(crate) fn on_rdone(&mut self, frame: &[u8]) -> bool {
        let ok = wire::read_rdone(frame).is_ok_and(|a| self.by_ref.on_rdone(a));
        if !ok {
            self.malformed += 1;
        }
        ok
    }

    /// The read `tag` of a message by reference ended: the message takes its place
    /// in its call (or the call ends with the error); the client hears `RDONE`.
    pub(crate) fn handle_read_done(&mut self, tag: u32, result: Result<bytes::Bytes, Status>) {
        let Some(id) = self.by_ref.finished(tag) else {
            return;
        };
        let Some(s) = self.streams.get_mut(&id).filter(|s| s.open) else {
            return; // ended meanwhile: the message is dropped (its region with it)
        };
        match result {
            Ok(m) => {
                let events = &mut self.events;
                s.recv.read_done(tag, m, |a| {
                    events.extend(a.map(|m| (id, ServerStreamEvent::Message(m))));
                });
                if !s.recv.holding() && std::mem::take(&mut s.deferred_half_close) {
                    self.events.push_back((id, ServerStreamEvent::HalfClosed));
                }
            }
            Err(st) => self.refuse(id, st),
        }
    }

    /// Sends a batch of whole messages the caller packed into `staged` (with
    /// [`wire::BatchWriter`], within [`ServerStreams::max_send_message`] and the
    /// call's [`ServerStreams::send_credit`]) as one `MSG` in `out`, taking a
    /// connection credit. Nothing is sent if the batch does not check.
    pub(crate) fn send_batch(
        &mut self,
        id: u32,
        staged: &[u8],
        out: &mut [u8],
    ) -> Result<Transmit, Status> {
        if !self.can_send(id) || staged.len() > out.len() {
            return Err(Status::failed_precondition("stream cannot send now"));
        }
        let s = self.streams.get_mut(&id).expect("can_send");
        s.send_credit.spend_batch(staged, self.max_send_message)?;
        out[..staged.len()].copy_from_slice(staged);
        self.credits -= 1;
        Ok(Transmit {
            len: staged.len(),
            imm: wire::imm(Kind::Msg, id),
        })
    }

    /// Call `id`'s credit to send, in charges (0 if it cannot send): a writer
    /// packing a batch begins messages while what it packed leaves some.
    pub fn send_credit(&self, id: u32) -> i64 {
        self.streams.get(&id).map_or(0, |s| s.send_credit.left())
    }

    /// The largest message this side sends.
    pub fn max_send_message(&self) -> usize {
        self.max_send_message
    }

    /// The handler's stream ended: its final status goes as `TRAILERS` after the
    /// messages already queued.
    pub fn finish(&mut self, id: u32, result: Result<MetadataMap, Status>) {
        let Some(s) = self.streams.get_mut(&id).filter(|s| s.open) else {
            return;
        };
        s.open = false;
        s.grant = 0;
        s.trailers = Some(result);
        self.queue(id);
    }

    /// The handler took messages of call `id` of `charge` in all (the sum of their
    /// [`wire::charge`]s): room for more.
    pub fn taken(&mut self, id: u32, charge: u64) {
        if let Some(s) = self.streams.get_mut(&id).filter(|s| s.open) {
            if let Some(n) = s.window.taken(charge) {
                if !s.half_closed {
                    s.grant += n;
                    self.queue(id);
                }
            }
        }
    }

    fn queue(&mut self, id: u32) {
        if !self.transmit.contains(&id) {
            self.transmit.push_back(id);
        }
    }

    fn maybe_forget(&mut self, id: u32) {
        if let Some(s) = self.streams.get(&id) {
            if !s.open && !s.unanswered && !s.has_work() {
                self.streams.remove(&id);
            }
        }
    }

    /// Whether a frame waits for a connection credit.
    pub(crate) fn wants_transmit(&self) -> bool {
        !self.answers.is_empty()
            || (self.credits > 0 && (!self.transmit.is_empty() || self.by_ref.owes_rdone()))
    }

    /// Ends call `id` here before its handler answered: its `REQ` is answered now
    /// with `status`, and the handler's later answer finds nothing to do.
    fn answer_now(&mut self, id: u32, status: Status) {
        if let Some(s) = self.streams.get_mut(&id).filter(|s| s.unanswered) {
            s.unanswered = false;
            self.answers.push_back((id, status));
        }
    }

    /// Writes the next queued frame (a `CREDIT`, the next `MSG` of a long message,
    /// `TRAILERS`) into `out`, taking a connection credit.
    pub(crate) fn poll_transmit(
        &mut self,
        out: &mut [u8],
        cuts: &mut StatusCuts,
    ) -> Option<Transmit> {
        if let Some((id, st)) = self.answers.pop_front() {
            let f = codec::write_status(&st, None, out, cuts);
            self.maybe_forget(id);
            return Some(Transmit {
                len: f.len,
                imm: wire::imm(Kind::Resp, id),
            });
        }
        if self.credits > 0 {
            if let Some(addr) = self.by_ref.poll_rdone() {
                // Ahead of the calls' frames: it frees the client's memory.
                self.credits -= 1;
                return Some(Transmit {
                    len: wire::write_rdone(out, addr),
                    imm: wire::imm(Kind::Rdone, 0),
                });
            }
        }
        let mut visits = self.transmit.len();
        while self.credits > 0 && visits > 0 {
            visits -= 1;
            let id = self.transmit.pop_front()?;
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            let t = if s.open && s.grant > 0 {
                let n = std::mem::take(&mut s.grant);
                Transmit {
                    len: wire::write_credit(out, n),
                    imm: wire::imm(Kind::Credit, id),
                }
            } else if let Some(o) = &mut s.sending {
                let len = o.write_next(out);
                if o.done() {
                    s.sending = None;
                    if s.open {
                        self.events.push_back((id, ServerStreamEvent::Writable));
                    }
                }
                Transmit {
                    len,
                    imm: wire::imm(Kind::Msg, id),
                }
            } else if s.unanswered {
                // Trailers wait for the REQ's answer (the headers go first).
                self.transmit.push_back(id);
                continue;
            } else if let Some(r) = s.trailers.take() {
                let len = match r {
                    Ok(md) => codec::write_response(&md, 0, out)
                        .unwrap_or_else(|st| codec::write_status(&st, None, out, cuts).len),
                    Err(st) => codec::write_status(&st, None, out, cuts).len,
                };
                Transmit {
                    len,
                    imm: wire::imm(Kind::Trailers, id),
                }
            } else {
                continue;
            };
            self.credits -= 1;
            if self.streams.get(&id).is_some_and(Stream::has_work) {
                self.transmit.push_back(id);
            }
            self.maybe_forget(id);
            return Some(t);
        }
        None
    }

    /// Handles a client frame of a streaming call (the caller answers it with `CR`).
    pub(crate) fn handle_frame(&mut self, kind: Kind, id: u32, frame: &[u8]) {
        if id == 0 {
            match (kind, wire::read_credit(frame)) {
                (Kind::Credit, Ok(n)) => {
                    let was = self.credits;
                    self.credits = self.credits.saturating_add(n).min(SERVER_CREDITS);
                    if was == 0 {
                        // Every writer may be waiting on the connection's credits.
                        let ids: Vec<u32> = self.streams.keys().copied().collect();
                        for id in ids {
                            self.events.push_back((id, ServerStreamEvent::Writable));
                        }
                    }
                }
                _ => self.malformed += 1,
            }
            return;
        }
        // A message by reference not read here is released at once.
        let by_ref = (kind == Kind::Msg)
            .then(|| wire::msg_by_ref(frame))
            .flatten();
        let Some(s) = self.streams.get_mut(&id).filter(|s| s.open) else {
            // Frames of a call that ended here (trailers sent, reset, refused) are
            // answered and dropped.
            if let Some(d) = by_ref {
                self.by_ref.refuse(d);
            }
            return;
        };
        match kind {
            Kind::Msg => {
                if s.half_closed {
                    self.malformed += 1;
                    if let Some(d) = by_ref {
                        self.by_ref.refuse(d);
                    }
                    return;
                }
                if by_ref.is_some() && !self.by_ref_agreed {
                    self.malformed += 1;
                    return self.refuse(
                        id,
                        Status::internal(
                            "stream message by reference on a connection without RDMA Read",
                        ),
                    );
                }
                let max = self.max_recv_message;
                let events = &mut self.events;
                // The handler's inbound queues messages one by one.
                let r = s.recv.take(frame, max, &mut s.window, |a| {
                    events.extend(a.map(|m| (id, ServerStreamEvent::Message(m))));
                });
                if let Received::ByRef(desc) = r {
                    let tag = self.by_ref.read(id, desc);
                    s.recv.hold(tag);
                    return;
                }
                if let Some(d) = by_ref {
                    self.by_ref.refuse(d);
                }
                match r {
                    Received::Ok | Received::ByRef(_) => {}
                    Received::NoCredit => {
                        self.malformed += 1;
                        self.refuse(id, Status::internal("client sent beyond its credit"));
                    }
                    Received::TooLong(len) => self.refuse(
                        id,
                        Status::resource_exhausted(format!(
                            "stream message of {len} bytes exceeds the limit of {max}"
                        )),
                    ),
                    Received::Malformed(why) => {
                        self.malformed += 1;
                        self.refuse(id, Status::internal(why));
                    }
                }
            }
            Kind::HalfClose => {
                if !s.half_closed {
                    s.half_closed = true;
                    s.grant = 0;
                    if s.recv.holding() {
                        // Messages by reference before it are still being read.
                        s.deferred_half_close = true;
                    } else {
                        self.events.push_back((id, ServerStreamEvent::HalfClosed));
                    }
                }
            }
            Kind::Reset => {
                let code = wire::read_reset(frame).unwrap_or(crate::code::Code::Cancelled);
                s.open = false;
                s.grant = 0;
                s.sending = None;
                let st = Status::new(code, "the client reset the call");
                self.answer_now(id, st.clone());
                self.events.push_back((id, ServerStreamEvent::Reset(st)));
                self.maybe_forget(id);
            }
            Kind::Credit => match wire::read_credit(frame) {
                Ok(n) => {
                    if s.send_credit.grant(n) && s.sending.is_none() {
                        self.events.push_back((id, ServerStreamEvent::Writable));
                    }
                }
                Err(_) => self.malformed += 1,
            },
            _ => self.malformed += 1,
        }
    }

    /// Ends a call this side refuses to go on with: the client hears `status` as the
    /// trailers, the handler as its inbound's end.
    fn refuse(&mut self, id: u32, status: Status) {
        if self.streams.get(&id).is_some_and(|s| s.unanswered) {
            // Trailers-only: the REQ's answer carries the status.
            self.answer_now(id, status.clone());
            if let Some(s) = self.streams.get_mut(&id) {
                s.open = false;
            }
        } else {
            self.finish(id, Err(status.clone()));
        }
        if let Some(s) = self.streams.get_mut(&id) {
            s.sending = None;
        }
        self.events
            .push_back((id, ServerStreamEvent::Reset(status)));
    }

    /// The next event, if it is a message of call `id` (a batch's messages are
    /// handed over together).
    pub fn poll_message_of(&mut self, id: u32) -> Option<bytes::Bytes> {
        match self.events.front() {
            Some((i, ServerStreamEvent::Message(_))) if *i == id => match self.events.pop_front() {
                Some((_, ServerStreamEvent::Message(m))) => Some(m),
                _ => None,
            },
            _ => None,
        }
    }

    /// The next event of a streaming call.
    pub fn poll_event(&mut self) -> Option<(u32, ServerStreamEvent)> {
        self.events.pop_front()
    }
}
