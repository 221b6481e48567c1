//! The client's streaming calls on one connection: their states, message credits,
//! deadlines, and the server's connection credits it returns.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use super::by_ref::ByRef;
use super::{write_message, Arrived, Incoming, Outgoing, Received, SendCredit, Window};
use crate::code::Code;
use crate::engine::codec::{self, Outcome};
use crate::engine::rendezvous::ReadOp;
use crate::engine::wire::{self, Descriptor, Kind, SERVER_CREDITS, STREAM_ID_BIT, STREAM_WINDOW};
use crate::engine::Transmit;
use crate::id_map::IdMap;
use crate::metadata::MetadataMap;
use crate::status::Status;

/// What happened to a streaming call, for its caller (drained with
/// [`ClientStreams::poll_event`]).
#[derive(Debug)]
pub enum StreamEvent {
    /// The server's handler answered: its response metadata. Comes first, once.
    Headers(MetadataMap),
    /// Whole messages from the server: one, or a batch's, read in place.
    Message(Arrived),
    /// The call may send a message again (credit came back, a long message left).
    Writable,
    /// The call ended: the trailers of an OK end, or the status. The last event.
    End(Result<MetadataMap, Status>),
}

#[derive(Debug)]
struct Stream {
    /// `None` once ended (its End event is out); the entry stays while answers are
    /// owed or frames queued.
    deadline: Option<(Instant, Duration)>,
    open: bool,
    headers: bool,
    /// Frames sent that the server has not answered.
    awaiting: u32,
    /// Charges the server lets this side send.
    send_credit: SendCredit,
    /// The rest of a long message being sent.
    sending: Option<Outgoing>,
    /// The client's half ended by its source: `HALF_CLOSE` to send (once).
    half_close: HalfClose,
    /// A `RESET` to send, with its code.
    reset: Option<Code>,
    /// A `CREDIT` to send: messages granted back.
    grant: u32,
    recv: Incoming,
    window: Window,
    /// Trailers that arrived while messages by reference before them were still
    /// being read: the call ends once they are delivered.
    deferred_end: Option<Result<MetadataMap, Status>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HalfClose {
    No,
    Queued,
    Sent,
}

impl Stream {
    fn has_work(&self) -> bool {
        self.reset.is_some()
            || (self.open
                && (self.sending.is_some()
                    || self.half_close == HalfClose::Queued
                    || self.grant > 0))
    }
}

/// Where the receives for the server's own frames stand ([`SERVER_CREDITS`] of
/// them, posted only once the connection streams).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerReceives {
    /// No stream yet: none posted, the server has no connection credit.
    None,
    /// A stream opened: the driver is to post them.
    Wanted,
    /// Posted, and granted to the server.
    Posted,
}

/// Limits of the client's streams (from the connection's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_send_message: usize,
    pub(crate) max_recv_message: usize,
}

/// The streaming calls of one client connection. [`crate::engine::ClientConn`] owns
/// it and hands it the frames and ids of streaming calls.
#[derive(Debug)]
pub struct ClientStreams {
    limits: Limits,
    streams: IdMap<u32, Stream>,
    next_id: u32,
    /// Calls with frames to send, in turn.
    transmit: VecDeque<u32>,
    events: VecDeque<(u32, StreamEvent)>,
    deadlines: BinaryHeap<Reverse<(Instant, u32)>>,
    /// Server frames that answer nothing, received and not yet reposted.
    unreposted: u32,
    /// Server connection credits reposted and not yet returned.
    owed: u32,
    /// `CREDIT` frames on call id 0 the server has not answered.
    conn_awaiting: u32,
    /// The receives for the server's own frames: posted on the first stream.
    receives: ServerReceives,
    /// Messages by reference, both ways.
    by_ref: ByRef,
    /// Both sides agreed on RDMA Read: a message by reference may be read here.
    by_ref_agreed: bool,
    /// The window each call grants the server (see [`Window::new`]).
    window: u32,
    /// Frames that did not fit the protocol.
    pub(crate) malformed: u64,
}

impl ClientStreams {
    pub(crate) fn new(limits: Limits) -> Self {
        ClientStreams {
            limits,
            streams: IdMap::default(),
            next_id: STREAM_ID_BIT,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            deadlines: BinaryHeap::new(),
            unreposted: 0,
            owed: 0,
            conn_awaiting: 0,
            receives: ServerReceives::None,
            window: STREAM_WINDOW,
            by_ref: ByRef::default(),
            by_ref_agreed: false,
            malformed: 0,
        }
    }

    /// Calls in the table (open, or ended with answers still owed).
    pub(crate) fn len(&self) -> usize {
        self.streams.len()
    }

    /// A fresh id with [`STREAM_ID_BIT`] set.
    fn alloc_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = ((self.next_id + 1) & wire::CALL_ID_MASK) | STREAM_ID_BIT;
            if !self.streams.contains_key(&id) {
                return id;
            }
        }
    }

    /// Opens a call whose `REQ` (head written by the caller at the start of `out`,
    /// `len` bytes) goes on a reserved token: flags it streaming.
    pub(crate) fn open(
        &mut self,
        now: Instant,
        timeout: Option<Duration>,
        out: &mut [u8],
        len: usize,
    ) -> (u32, Transmit) {
        wire::set_request_stream(out);
        if self.receives == ServerReceives::None {
            self.receives = ServerReceives::Wanted;
        }
        let id = self.alloc_id();
        let deadline = timeout.map(|t| (now + t, t));
        if let Some((at, _)) = deadline {
            self.deadlines.push(Reverse((at, id)));
        }
        self.streams.insert(
            id,
            Stream {
                deadline,
                open: true,
                headers: false,
                awaiting: 1,
                send_credit: SendCredit::default(),
                sending: None,
                half_close: HalfClose::No,
                reset: None,
                grant: 0,
                recv: Incoming::default(),
                window: Window::new(self.window),
                deferred_end: None,
            },
        );
        (
            id,
            Transmit {
                len,
                imm: wire::imm(Kind::Req, id),
            },
        )
    }

    /// Whether call `id` may send a message now (open, its half not ended, credit
    /// from the server, no long message still going out).
    pub fn can_send(&self, id: u32) -> bool {
        self.streams.get(&id).is_some_and(|s| {
            s.open && s.half_close == HalfClose::No && s.send_credit.open() && s.sending.is_none()
        })
    }

    /// Whether call `id` has ended (or is unknown).
    pub fn ended(&self, id: u32) -> bool {
        self.streams.get(&id).is_none_or(|s| !s.open)
    }

    /// Sends a message of `len` bytes, written by `encode`, on a reserved token: its
    /// first (or only) `MSG` into `out`. A message over the max message resets the
    /// call `RESOURCE_EXHAUSTED` (the caller gives the token back).
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
        if len > self.limits.max_send_message {
            let s = Status::resource_exhausted(format!(
                "stream message of {len} bytes exceeds the limit of {}",
                self.limits.max_send_message
            ));
            self.reset(id, s.clone());
            return Err(s);
        }
        let s = self.streams.get_mut(&id).expect("can_send");
        let (n, rest) = write_message(len, encode, out);
        s.send_credit.spend(len);
        s.awaiting += 1;
        if rest.is_some() {
            s.sending = rest;
            self.queue(id);
        }
        Ok(Transmit {
            len: n,
            imm: wire::imm(Kind::Msg, id),
        })
    }

    /// Sends a message by reference on a reserved token: the driver encoded its
    /// `desc.len` bytes into a region it lends at `desc` until
    /// [`ClientStreams::poll_released`] names the address (or the connection ends).
    /// On error nothing is sent and the region is free (a message over the max
    /// message resets the call `RESOURCE_EXHAUSTED`, as [`ClientStreams::send_message`]).
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
        if len > self.limits.max_send_message {
            let s = Status::resource_exhausted(format!(
                "stream message of {len} bytes exceeds the limit of {}",
                self.limits.max_send_message
            ));
            self.reset(id, s.clone());
            return Err(s);
        }
        let s = self.streams.get_mut(&id).expect("can_send");
        s.send_credit.spend(len);
        s.awaiting += 1;
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

    /// Each later call lets the server send up to `size` bytes of messages ahead
    /// of its reader (see [`Window::new`]).
    pub(crate) fn set_window(&mut self, size: u32) {
        self.window = size;
    }

    /// The next stream message to read by RDMA Read (then
    /// [`ClientStreams::handle_read_done`] under its tag).
    pub(crate) fn poll_read(&mut self) -> Option<ReadOp> {
        self.by_ref.poll_read()
    }

    /// The next address of a stream message lent to the server that it is done with.
    pub(crate) fn poll_released(&mut self) -> Option<u64> {
        self.by_ref.poll_released()
    }

    /// Whether reads to start or lent regions to free wait for the driver.
    pub(crate) fn by_ref_pending(&self) -> bool {
        self.by_ref.pending()
    }

    /// Stream messages lent to the server and not yet released.
    pub fn lent_messages(&self) -> usize {
        self.by_ref.lent()
    }

    /// The read `tag` of a message by reference ended: the message takes its place
    /// in its call (or the call ends with the error); the server hears `RDONE`.
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
                s.recv
                    .read_done(tag, m, |m| events.push_back((id, StreamEvent::Message(m))));
                if !s.recv.holding() {
                    if let Some(r) = s.deferred_end.take() {
                        self.end(id, r);
                    }
                }
            }
            Err(st) => self.reset(id, st),
        }
    }

    /// Sends a batch of whole messages the caller packed into `staged` (with
    /// [`wire::BatchWriter`], within [`ClientStreams::max_send_message`] and the
    /// call's [`ClientStreams::send_credit`]) as one `MSG` in `out`, on a reserved
    /// token. Nothing is sent if the batch does not check.
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
        s.send_credit
            .spend_batch(staged, self.limits.max_send_message)?;
        out[..staged.len()].copy_from_slice(staged);
        s.awaiting += 1;
        Ok(Transmit {
            len: staged.len(),
            imm: wire::imm(Kind::Msg, id),
        })
    }

    /// Call `id`'s credit to send, in charges (0 if unknown).
    pub fn send_credit(&self, id: u32) -> i64 {
        self.streams.get(&id).map_or(0, |s| s.send_credit.left())
    }

    /// The largest message this side sends.
    pub fn max_send_message(&self) -> usize {
        self.limits.max_send_message
    }

    /// Whether the driver is to post [`SERVER_CREDITS`] receives for the server's
    /// own frames (the connection's first stream opened), then say so with
    /// [`ClientStreams::receives_posted`].
    pub fn receives_wanted(&self) -> bool {
        self.receives == ServerReceives::Wanted
    }

    /// Whether the receives for the server's frames were posted.
    pub fn receives_posted_already(&self) -> bool {
        self.receives == ServerReceives::Posted
    }

    /// The receives for the server's frames are posted: they are granted to the
    /// server (a `CREDIT` on call id 0 goes with the next frames).
    pub fn receives_posted(&mut self) {
        if self.receives == ServerReceives::Wanted {
            self.receives = ServerReceives::Posted;
            self.owed += SERVER_CREDITS;
        }
    }

    /// The client's source ended: no more messages this way.
    pub fn half_close(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            if s.open && s.half_close == HalfClose::No {
                s.half_close = HalfClose::Queued;
                self.queue(id);
            }
        }
    }

    /// The reader took messages of call `id` of `charge` in all (the sum of their
    /// [`wire::charge`]s): room for more.
    pub fn taken(&mut self, id: u32, charge: u64) {
        if let Some(s) = self.streams.get_mut(&id) {
            if let Some(n) = s.window.taken(charge) {
                if s.open {
                    s.grant += n;
                    self.queue(id);
                }
            }
        }
    }

    /// The client ends call `id` now with `status` (its reader went away, its source
    /// failed, a deadline): the server is told with `RESET`, and the call's End
    /// event carries `status` if it had not ended.
    pub fn reset(&mut self, id: u32, status: Status) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if !s.open {
            return;
        }
        s.reset = Some(status.code());
        self.end(id, Err(status));
        self.queue(id);
    }

    fn queue(&mut self, id: u32) {
        if !self.transmit.contains(&id) {
            self.transmit.push_back(id);
        }
    }

    fn end(&mut self, id: u32, result: Result<MetadataMap, Status>) {
        if let Some(s) = self.streams.get_mut(&id) {
            if s.open {
                s.open = false;
                s.sending = None;
                s.grant = 0;
                self.events.push_back((id, StreamEvent::End(result)));
            }
        }
        self.maybe_forget(id);
    }

    fn maybe_forget(&mut self, id: u32) {
        if let Some(s) = self.streams.get(&id) {
            if !s.open && s.awaiting == 0 && !s.has_work() {
                self.streams.remove(&id);
            }
        }
    }

    /// Whether a frame waits for a token.
    pub(crate) fn wants_transmit(&self) -> bool {
        !self.transmit.is_empty() || (self.owed >= SERVER_CREDITS / 2) || self.by_ref.owes_rdone()
    }

    /// Writes the next queued frame (connection credits back, `RESET`, `CREDIT`,
    /// `HALF_CLOSE`, the next `MSG` of a long message) into `out`, taking a token.
    /// Frames the server answers at once may take the last token; `MSG`s leave it.
    pub(crate) fn poll_transmit(&mut self, tokens: &mut u32, out: &mut [u8]) -> Option<Transmit> {
        if *tokens == 0 {
            return None;
        }
        if self.owed >= SERVER_CREDITS / 2 {
            let n = std::mem::take(&mut self.owed);
            *tokens -= 1;
            self.conn_awaiting += 1;
            return Some(Transmit {
                len: wire::write_credit(out, n),
                imm: wire::imm(Kind::Credit, 0),
            });
        }
        if let Some(addr) = self.by_ref.poll_rdone() {
            // Answered at once (by `CR` on call id 0): frees the server's region.
            *tokens -= 1;
            self.conn_awaiting += 1;
            return Some(Transmit {
                len: wire::write_rdone(out, addr),
                imm: wire::imm(Kind::Rdone, 0),
            });
        }
        let mut visits = self.transmit.len();
        while visits > 0 {
            visits -= 1;
            let id = self.transmit.pop_front()?;
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            let t = if let Some(code) = s.reset.take() {
                out[0] = code as u8;
                Transmit {
                    len: 1,
                    imm: wire::imm(Kind::Reset, id),
                }
            } else if !s.open {
                continue;
            } else if s.grant > 0 {
                let n = std::mem::take(&mut s.grant);
                Transmit {
                    len: wire::write_credit(out, n),
                    imm: wire::imm(Kind::Credit, id),
                }
            } else if let Some(o) = &mut s.sending {
                if *tokens <= 1 {
                    // The last token is for frames answered at once.
                    self.transmit.push_back(id);
                    continue;
                }
                let len = o.write_next(out);
                if o.done() {
                    s.sending = None;
                    self.events.push_back((id, StreamEvent::Writable));
                }
                Transmit {
                    len,
                    imm: wire::imm(Kind::Msg, id),
                }
            } else if s.half_close == HalfClose::Queued {
                s.half_close = HalfClose::Sent;
                Transmit {
                    len: 0,
                    imm: wire::imm(Kind::HalfClose, id),
                }
            } else {
                continue;
            };
            s.awaiting += 1;
            if s.has_work() {
                self.transmit.push_back(id);
            }
            *tokens -= 1;
            return Some(t);
        }
        None
    }

    /// `n` receive slots were reposted: those of server frames that answer nothing
    /// become connection credits owed to the server; the rest are the client's
    /// tokens, returned.
    pub(crate) fn absorb_reposts(&mut self, n: u32) -> u32 {
        let k = n.min(self.unreposted);
        self.unreposted -= k;
        self.owed += k;
        n - k
    }

    /// Handles a frame of a streaming call (or of call id 0). Returns whether it
    /// answered a client frame (its slot then returns a token when reposted).
    pub(crate) fn handle_frame(&mut self, kind: Kind, id: u32, frame: &[u8]) {
        match kind {
            Kind::Cr | Kind::Resp => self.on_answer(kind, id, frame),
            Kind::Msg | Kind::Trailers | Kind::Credit | Kind::Rdone => {
                self.unreposted += 1;
                match kind {
                    Kind::Msg => self.on_message(id, frame),
                    Kind::Trailers => self.on_trailers(id, frame),
                    Kind::Rdone => self.on_rdone(id, frame),
                    _ => self.on_credit(id, frame),
                }
            }
            _ => self.malformed += 1,
        }
    }

    fn on_answer(&mut self, kind: Kind, id: u32, frame: &[u8]) {
        if id == 0 && kind == Kind::Cr && self.conn_awaiting > 0 {
            self.conn_awaiting -= 1;
            return;
        }
        let Some(s) = self.streams.get_mut(&id).filter(|s| s.awaiting > 0) else {
            self.malformed += 1;
            return;
        };
        s.awaiting -= 1;
        if kind == Kind::Resp {
            if !s.open {
                // Ended here first (reset, deadline): a late answer.
            } else if s.headers {
                self.malformed += 1;
            } else {
                self.on_headers(id, frame);
            }
        }
        self.maybe_forget(id);
    }

    fn on_headers(&mut self, id: u32, frame: &[u8]) {
        let streaming = wire::response_is_stream(frame);
        let start = match codec::read_response(frame) {
            Ok(start) => start,
            Err(s) => {
                self.malformed += 1;
                return self.reset(id, s);
            }
        };
        match (start.outcome, streaming) {
            (Outcome::Ok(md), true) => {
                let s = self.streams.get_mut(&id).expect("present");
                s.headers = true;
                // The window beyond the wire's at open, once the server surely knows
                // the call (a `CREDIT` before it opened the call would find nothing).
                let beyond = s.window.beyond_open();
                if beyond > 0 {
                    s.grant += beyond;
                    self.queue(id);
                }
                self.events.push_back((id, StreamEvent::Headers(md)));
            }
            (Outcome::Status(mut s), _) => {
                // Trailers-only: the handler failed before answering.
                if start.body.len() == start.body_len && !start.body.is_empty() {
                    s.set_details(bytes::Bytes::copy_from_slice(&frame[start.body]));
                }
                self.end(id, Err(s));
            }
            (Outcome::Ok(_), false) => {
                self.malformed += 1;
                self.reset(
                    id,
                    Status::internal("a streaming call answered as a unary one"),
                );
            }
        }
    }

    fn on_rdone(&mut self, id: u32, frame: &[u8]) {
        let known = id == 0 && wire::read_rdone(frame).is_ok_and(|a| self.by_ref.on_rdone(a));
        if !known {
            self.malformed += 1;
        }
    }

    fn on_message(&mut self, id: u32, frame: &[u8]) {
        let max = self.limits.max_recv_message;
        // A message by reference not read here is released at once.
        let by_ref = wire::msg_by_ref(frame);
        let Some(s) = self.streams.get_mut(&id).filter(|s| s.open) else {
            // Ended here (reset, deadline) while messages were on their way.
            if let Some(d) = by_ref {
                self.by_ref.refuse(d);
            }
            return;
        };
        if !s.headers {
            self.malformed += 1;
            if let Some(d) = by_ref {
                self.by_ref.refuse(d);
            }
            return self.reset(id, Status::internal("stream message before headers"));
        }
        if by_ref.is_some() && !self.by_ref_agreed {
            self.malformed += 1;
            return self.reset(
                id,
                Status::internal("stream message by reference on a connection without RDMA Read"),
            );
        }
        let events = &mut self.events;
        let r = s.recv.take(frame, max, &mut s.window, |m| {
            events.push_back((id, StreamEvent::Message(m)));
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
                self.reset(id, Status::internal("server sent beyond its credit"));
            }
            Received::TooLong(len) => self.reset(
                id,
                Status::resource_exhausted(format!(
                    "stream message of {len} bytes exceeds the limit of {max}"
                )),
            ),
            Received::Malformed(why) => {
                self.malformed += 1;
                self.reset(id, Status::internal(why));
            }
        }
    }

    fn on_trailers(&mut self, id: u32, frame: &[u8]) {
        let Some(s) = self.streams.get(&id).filter(|s| s.open) else {
            return;
        };
        let holding = s.recv.holding();
        let result = match codec::read_response(frame) {
            Ok(start) => match start.outcome {
                Outcome::Ok(md) => Ok(md),
                Outcome::Status(mut s) => {
                    if !start.body.is_empty() {
                        s.set_details(bytes::Bytes::copy_from_slice(&frame[start.body]));
                    }
                    Err(s)
                }
            },
            Err(s) => {
                self.malformed += 1;
                Err(s)
            }
        };
        if holding {
            // Messages by reference before the trailers are still being read.
            if let Some(s) = self.streams.get_mut(&id) {
                s.deferred_end = Some(result);
            }
            return;
        }
        self.end(id, result);
    }

    fn on_credit(&mut self, id: u32, frame: &[u8]) {
        let Ok(n) = wire::read_credit(frame) else {
            self.malformed += 1;
            return;
        };
        if let Some(s) = self.streams.get_mut(&id).filter(|s| s.open) {
            if s.send_credit.grant(n) && s.sending.is_none() {
                self.events.push_back((id, StreamEvent::Writable));
            }
        }
    }

    /// The next event, if it is messages of call `id` (messages that arrived
    /// together are handed over together).
    pub fn poll_message_of(&mut self, id: u32) -> Option<Arrived> {
        match self.events.front() {
            Some((i, StreamEvent::Message(_))) if *i == id => match self.events.pop_front() {
                Some((_, StreamEvent::Message(m))) => Some(m),
                _ => None,
            },
            _ => None,
        }
    }

    /// The next event of a streaming call.
    pub fn poll_event(&mut self) -> Option<(u32, StreamEvent)> {
        self.events.pop_front()
    }

    /// The earliest deadline of an open streaming call.
    pub(crate) fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, id))) = self.deadlines.peek() {
            if self.enforces(id, at) {
                return Some(at);
            }
            self.deadlines.pop();
        }
        None
    }

    fn enforces(&self, id: u32, at: Instant) -> bool {
        self.streams
            .get(&id)
            .is_some_and(|s| s.open && s.deadline.is_some_and(|(d, _)| d == at))
    }

    /// Ends the calls whose deadline passed `DEADLINE_EXCEEDED`, resetting them at
    /// the server.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((at, id))) = self.deadlines.peek() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            if let Some((_, t)) = self
                .streams
                .get(&id)
                .filter(|_| self.enforces(id, at))
                .and_then(|s| s.deadline)
            {
                self.reset(
                    id,
                    Status::deadline_exceeded(format!("deadline of {t:?} exceeded")),
                );
            }
        }
    }

    /// The peer is gone: every open call ends with `status`.
    pub(crate) fn handle_peer_lost(&mut self, status: &Status) {
        for (id, s) in self.streams.drain() {
            if s.open {
                self.events
                    .push_back((id, StreamEvent::End(Err(status.clone()))));
            }
        }
        self.transmit.clear();
        self.deadlines.clear();
        self.by_ref.clear();
    }
}
