//! The client side of one connection: call table, credits, fragments, deadlines.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::ops::Range;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::engine::codec::{self, CallHead, Outcome};
use crate::engine::gather::ByRef;
use crate::engine::rendezvous::{ReadOp, STREAM_READ_TAG};
use crate::engine::stream::client::{ClientStreams, Limits, StreamEvent};
use crate::engine::wire::{self, CreditAdjust, Descriptor, Kind};
use crate::engine::{Now, Transmit, MIN_FRAME};
use crate::id_map::IdMap;
use crate::metadata::MetadataMap;
use crate::server::EncodeMessage;
use crate::status::Status;

/// Limits of a client connection (the credits and frame size come from the handshake).
#[derive(Debug, Clone, Copy)]
pub struct ClientConfig {
    /// Frames the client may have unanswered (receives the server reserved for it),
    /// one of which is kept for CANCEL frames: `credits - 1` calls can be in flight.
    pub credits: u32,
    /// Largest frame in bytes (the slot size both sides agreed on).
    pub frame_size: usize,
    /// Largest request body the client sends.
    pub max_send_message: usize,
    /// Largest response body the client accepts.
    pub max_recv_message: usize,
}

/// Counters a user or a test can read to see what the engine dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Replies that arrived for calls already cancelled or timed out.
    pub late_replies: u64,
    /// Frames that could not be read or did not fit the protocol.
    pub malformed: u64,
    /// Frames sent.
    pub frames_sent: u64,
    /// Statuses delivered without their details (longer than the max message).
    pub details_dropped: u64,
    /// Requests lent by reference.
    pub by_ref_out: u64,
    /// Responses read by reference.
    pub by_ref_in: u64,
}

/// A successful reply's bytes.
#[derive(Debug)]
pub enum Reply {
    /// The whole response is in the frame just handled: keep its slot, the body is
    /// this range of it.
    InFrame {
        /// Response metadata.
        metadata: MetadataMap,
        /// Body range in the frame.
        body: Range<usize>,
    },
    /// Reassembled from fragments.
    Owned {
        /// Response metadata.
        metadata: MetadataMap,
        /// The body.
        body: Vec<u8>,
    },
    /// Read by reference into a pooled region, shared (no copy).
    Shared {
        /// Response metadata.
        metadata: MetadataMap,
        /// The body.
        body: Bytes,
    },
}

/// A call that ended, with what its caller waits on.
#[derive(Debug)]
pub struct Completion<W> {
    /// Call id.
    pub id: u32,
    /// The waiter given to [`ClientConn::start_call`].
    pub waiter: W,
    /// How it ended.
    pub result: Result<Reply, Status>,
}

#[derive(Debug)]
enum Phase {
    /// Request body still being pushed: `body[sent..]` remains.
    Sending { body: Vec<u8>, sent: usize },
    /// Request sent, no response yet.
    Waiting,
    /// Response body (or a status's details) being pulled.
    Pulling {
        outcome: Outcome,
        body: Vec<u8>,
        expected: usize,
    },
    /// Response body being read by reference (the driver's RDMA Read).
    Reading { outcome: Outcome },
    /// Nothing more to send or receive for this call except owed answers.
    Done,
}

#[derive(Debug)]
struct Call<W> {
    /// `None` once the call is retired (completed, cancelled or timed out).
    waiter: Option<W>,
    /// When the call ends `DEADLINE_EXCEEDED`, and the timeout it was given.
    deadline: Option<(Instant, Duration)>,
    phase: Phase,
    /// Frames sent for this call that the server has not answered yet.
    awaiting: u32,
    /// RFRs still to send.
    rfrs: u32,
    /// A CANCEL still to send.
    cancel: bool,
    /// An RDONE still to send (the response's region was read).
    rdone: bool,
    /// The request's body is lent by reference until the `REQ`'s answer.
    lent: bool,
}

impl<W> Call<W> {
    fn has_work(&self) -> bool {
        self.cancel || self.rdone || self.rfrs > 0 || matches!(self.phase, Phase::Sending { .. })
    }

    /// Whether the deadline entry `at` is this call's and still to be enforced.
    fn enforces(&self, at: Instant) -> bool {
        self.waiter.is_some() && self.deadline.is_some_and(|(d, _)| d == at)
    }
}

/// One client connection's protocol state. `W` is what a caller waits on (a oneshot
/// sender in the driver); the engine hands it back in the call's [`Completion`].
#[derive(Debug)]
pub struct ClientConn<W> {
    cfg: ClientConfig,
    /// Tokens neither in use nor reserved.
    tokens: u32,
    reserved: u32,
    calls: IdMap<u32, Call<W>>,
    next_id: u32,
    /// Calls with frames to send, in turn.
    transmit: VecDeque<u32>,
    completions: VecDeque<Completion<W>>,
    /// Deadlines of calls started with one, earliest first. An entry outlives its
    /// call (deleted lazily: skipped when it comes up, and pruned from the top by
    /// [`ClientConn::poll_timeout`]); [`ClientConn::add_deadline`] compacts the heap
    /// when stale entries outnumber the calls, so it stays within twice the table.
    deadlines: BinaryHeap<Reverse<(Instant, u32)>>,
    dead: Option<Status>,
    stats: ClientStats,
    /// Streaming calls (ids with [`wire::STREAM_ID_BIT`]): a table of their own, so
    /// that unary calls pay nothing for them.
    streams: ClientStreams,
    /// The server moves the window (`CREDIT_WINDOWS` agreed); `cfg.credits` is then
    /// the current window.
    windows: bool,
    /// The largest window the server may grant (the receives the driver can post).
    max_window: u32,
    /// Revoked tokens whose answer slots are still to be reposted: their returns are
    /// not tokens any more.
    debt: u32,
    /// A caller found no token since the last `REQ`: the next one says `WANT_CREDIT`.
    starved: bool,
    /// A `WANT` frame awaits its `CR`.
    want_in_flight: bool,
    /// Bodies longer than this go by reference (both sides agreed on RDMA Read);
    /// `None`: never, and a response by reference is malformed.
    rendezvous: Option<usize>,
    /// Response bodies for the driver to read.
    reads: VecDeque<ReadOp>,
    /// Calls whose lent request region the driver may reuse.
    released: VecDeque<u32>,
    /// The last `WANT` brought nothing: no other until another answer arrives.
    want_blocked: bool,
}

impl<W> ClientConn<W> {
    /// A connection with `cfg.credits` tokens.
    ///
    /// # Panics
    /// If `cfg.frame_size` is below [`MIN_FRAME`] or `credits` is below 2 (one is
    /// kept for CANCEL frames).
    pub fn new(cfg: ClientConfig) -> Self {
        assert!(cfg.frame_size >= MIN_FRAME && cfg.credits >= 2);
        ClientConn {
            cfg,
            tokens: cfg.credits,
            reserved: 0,
            calls: IdMap::default(),
            next_id: 1,
            transmit: VecDeque::new(),
            completions: VecDeque::new(),
            deadlines: BinaryHeap::new(),
            dead: None,
            stats: ClientStats::default(),
            streams: ClientStreams::new(Limits {
                max_send_message: cfg.max_send_message,
                max_recv_message: cfg.max_recv_message,
            }),
            windows: false,
            max_window: cfg.credits,
            debt: 0,
            starved: false,
            want_in_flight: false,
            want_blocked: false,
            rendezvous: None,
            reads: VecDeque::new(),
            released: VecDeque::new(),
        }
    }

    /// Each streaming call lets the server send up to `size` bytes of messages
    /// (their charges) ahead of its reader: at least the wire's `STREAM_WINDOW`,
    /// granted beyond it once the call's headers arrive.
    pub fn with_stream_window(mut self, size: u32) -> Self {
        self.streams.set_window(size);
        self
    }

    /// Lets bodies travel by reference (both sides offered RDMA Read): requests
    /// longer than `threshold` go by [`ClientConn::start_call_by_ref`], and
    /// responses by reference are read ([`ClientConn::poll_read`]).
    pub fn with_rendezvous(mut self, threshold: usize) -> Self {
        self.rendezvous = Some(threshold);
        self.streams.agree_by_ref();
        self
    }

    /// Whether Reads to start or released regions wait for the driver
    /// (`poll_read`, `poll_released`): one check per batch on the hot path.
    pub fn rendezvous_pending(&self) -> bool {
        !self.reads.is_empty() || !self.released.is_empty() || self.streams.by_ref_pending()
    }

    /// The rendezvous threshold, if bodies may travel by reference.
    pub fn rendezvous(&self) -> Option<usize> {
        self.rendezvous
    }

    /// Whether a request of `body_len` bytes should be lent by reference.
    pub fn request_by_ref(&self, body_len: usize) -> bool {
        self.rendezvous.is_some_and(|t| body_len > t)
            && body_len <= self.cfg.max_send_message
            && u32::try_from(body_len).is_ok()
    }

    /// The next response body to read by RDMA Read (then
    /// [`ClientConn::handle_read_done`]).
    pub fn poll_read(&mut self) -> Option<ReadOp> {
        self.reads.pop_front().or_else(|| self.streams.poll_read())
    }

    /// The next call whose lent request region the driver may reuse (the server
    /// answered its `REQ`, so it read the region or never will).
    pub fn poll_released(&mut self) -> Option<u32> {
        self.released.pop_front()
    }

    /// The next address of a stream message lent to the server that the driver may
    /// reuse (the server sent its `RDONE`).
    pub fn poll_released_message(&mut self) -> Option<u64> {
        self.streams.poll_released()
    }

    /// Starts a call on a reserved token whose request body the driver lends to
    /// the server: encoded into a region of its own (a descriptor), or where its
    /// large parts lie (a gather list, only to a server that granted
    /// `GATHER_REQUESTS`). The `REQ` carries it in place of the body. What it names
    /// is in use until [`ClientConn::poll_released`] names the call (or the
    /// connection dies). On error the reservation is released, nothing is sent and
    /// the memory is free.
    pub fn start_call_by_ref(
        &mut self,
        now: impl Now,
        waiter: W,
        head: &CallHead<'_>,
        body: ByRef<'_>,
        out: &mut [u8],
    ) -> Result<(u32, Transmit), Status> {
        assert!(
            self.reserved > 0,
            "start_call_by_ref without a reserved token"
        );
        let res = self.start_by_ref_inner(now, waiter, head, body, out);
        if res.is_err() {
            self.unreserve();
        } else {
            self.reserved -= 1;
            self.stats.frames_sent += 1;
            self.stats.by_ref_out += 1;
            if self.windows && std::mem::take(&mut self.starved) {
                out[wire::REQ_FLAGS_AT] |= wire::REQ_WANT_CREDIT;
            }
        }
        res
    }

    fn start_by_ref_inner(
        &mut self,
        now: impl Now,
        waiter: W,
        head: &CallHead<'_>,
        body: ByRef<'_>,
        out: &mut [u8],
    ) -> Result<(u32, Transmit), Status> {
        if let Some(s) = &self.dead {
            return Err(s.clone());
        }
        let cap = self.cfg.frame_size.min(out.len());
        let out = &mut out[..cap];
        let body_len = body.body_len();
        let head_len = codec::write_request(head, body_len, out)?;
        if head_len + body.wire_len() > out.len() {
            return Err(Status::resource_exhausted(format!(
                "path and metadata ({head_len} bytes) leave no room for a {}-byte descriptor in a {}-byte frame",
                body.wire_len(),
                out.len()
            )));
        }
        if body_len > self.cfg.max_send_message {
            return Err(Status::resource_exhausted(format!(
                "request message of {body_len} bytes exceeds the limit of {}",
                self.cfg.max_send_message
            )));
        }
        out[wire::REQ_FLAGS_AT] |= body.flags();
        body.write(&mut out[head_len..]);
        let id = self.alloc_id();
        self.insert_call(now, id, waiter, head, Phase::Waiting, true);
        Ok((
            id,
            Transmit {
                len: head_len + body.wire_len(),
                imm: wire::imm(Kind::Req, id),
            },
        ))
    }

    fn insert_call(
        &mut self,
        now: impl Now,
        id: u32,
        waiter: W,
        head: &CallHead<'_>,
        phase: Phase,
        lent: bool,
    ) {
        let deadline = head.timeout.map(|t| (now.now() + t, t));
        self.calls.insert(
            id,
            Call {
                waiter: Some(waiter),
                deadline,
                phase,
                awaiting: 1,
                rfrs: 0,
                cancel: false,
                rdone: false,
                lent,
            },
        );
        if let Some((at, _)) = deadline {
            self.add_deadline(at, id);
        }
    }

    /// The Read of call `id`'s response body ended: the call completes with the
    /// body (sharing the region it was read into) or the error, and an `RDONE`
    /// tells the server it may reuse its region. A call cancelled meanwhile was
    /// already forgotten by the server (its `CANCEL` released the region).
    pub fn handle_read_done(
        &mut self,
        id: u32,
        result: Result<Bytes, Status>,
    ) -> Option<Completion<W>> {
        if id & STREAM_READ_TAG != 0 {
            // A stream message: its call's events say what became of it.
            if self.dead.is_none() {
                self.streams.handle_read_done(id, result);
            }
            return None;
        }
        let call = self.calls.get_mut(&id)?;
        if !matches!(call.phase, Phase::Reading { .. }) {
            return None;
        }
        let Phase::Reading { outcome } = std::mem::replace(&mut call.phase, Phase::Done) else {
            unreachable!()
        };
        if self.dead.is_none() {
            call.rdone = true;
            self.transmit.push_back(id);
        }
        self.stats.by_ref_in += 1;
        let result = result.and_then(|b| {
            outcome
                .finish(b, |b| b)
                .map(|(metadata, body)| Reply::Shared { metadata, body })
        });
        self.finish(id, result)
    }

    /// Lets the server move the window from `cfg.credits` up to `max` (both sides
    /// offered `CREDIT_WINDOWS`; `max` is what the client asked for): answers may
    /// grant or revoke a token, and a `REQ` after a caller found no token asks for
    /// more. A grant beyond `max` or a revoke below 2 is malformed and ignored.
    pub fn with_credit_windows(mut self, max: u32) -> Self {
        self.windows = true;
        self.max_window = max.max(self.cfg.credits);
        self
    }

    /// Asks the server for credit with a `WANT` at the next [`ClientConn::poll_transmit`]
    /// (with credit windows; a new connection does so at once, which also proves its
    /// RDMA path to the server).
    pub fn ask_credit(&mut self) {
        self.starved |= self.windows;
    }

    /// The current window: tokens free, reserved or in use. The driver keeps at
    /// least this many answer receives posted.
    pub fn window(&self) -> u32 {
        self.cfg.credits
    }

    /// Counters.
    pub fn stats(&self) -> ClientStats {
        let mut s = self.stats;
        s.malformed += self.streams.malformed;
        s
    }

    /// Calls in the table (open, or retired with answers still owed), streaming
    /// calls included.
    pub fn calls(&self) -> usize {
        self.calls.len() + self.streams.len()
    }

    /// The streaming calls: their events and what their callers do to them.
    pub fn streams(&mut self) -> &mut ClientStreams {
        &mut self.streams
    }

    /// The next event of a streaming call.
    pub fn poll_stream_event(&mut self) -> Option<(u32, StreamEvent)> {
        self.streams.poll_event()
    }

    /// Opens a streaming call on a reserved token, writing its `REQ` (flagged
    /// `STREAM`, no body) into `out`; its messages follow with
    /// [`ClientConn::send_stream_message`]. On error the reservation is released.
    pub fn start_stream(
        &mut self,
        now: Instant,
        head: &CallHead<'_>,
        out: &mut [u8],
    ) -> Result<(u32, Transmit), Status> {
        assert!(self.reserved > 0, "start_stream without a reserved token");
        let r = match &self.dead {
            Some(s) => Err(s.clone()),
            None => {
                let cap = self.cfg.frame_size.min(out.len());
                codec::write_request(head, 0, &mut out[..cap])
            }
        };
        self.reserved -= 1;
        match r {
            Ok(len) => {
                self.stats.frames_sent += 1;
                Ok(self.streams.open(now, head.timeout, out, len))
            }
            Err(s) => {
                self.tokens += 1;
                Err(s)
            }
        }
    }

    /// Sends a message of streaming call `id` on a reserved token (see
    /// [`ClientStreams::can_send`]); on error the reservation is released.
    pub fn send_stream_message(
        &mut self,
        id: u32,
        len: usize,
        encode: impl FnOnce(&mut [u8]),
        out: &mut [u8],
    ) -> Result<Transmit, Status> {
        assert!(
            self.reserved > 0,
            "send_stream_message without a reserved token"
        );
        self.reserved -= 1;
        let cap = self.cfg.frame_size.min(out.len());
        match self.streams.send_message(id, len, encode, &mut out[..cap]) {
            Ok(t) => {
                self.stats.frames_sent += 1;
                Ok(t)
            }
            Err(s) => {
                self.tokens += 1;
                Err(s)
            }
        }
    }

    /// Sends a message of streaming call `id` by reference on a reserved token: the
    /// driver encoded its `desc.len` bytes into a region it lends until
    /// [`ClientConn::poll_released_message`] names `desc.addr` (or the connection
    /// dies). On error the reservation is released and the region is free.
    pub fn send_stream_message_by_ref(
        &mut self,
        id: u32,
        desc: Descriptor,
        out: &mut [u8],
    ) -> Result<Transmit, Status> {
        assert!(
            self.reserved > 0,
            "send_stream_message_by_ref without a reserved token"
        );
        self.reserved -= 1;
        let r = if self.rendezvous.is_some() && self.dead.is_none() {
            self.streams.send_message_by_ref(id, desc, out)
        } else {
            Err(Status::failed_precondition(
                "no RDMA Read on this connection",
            ))
        };
        match r {
            Ok(t) => {
                self.stats.frames_sent += 1;
                Ok(t)
            }
            Err(s) => {
                self.tokens += 1;
                Err(s)
            }
        }
    }

    /// Sends a batch of whole messages of streaming call `id`, packed into `staged`
    /// (see [`ClientStreams::send_credit`]), as one frame on a reserved token; on
    /// error the reservation is released.
    pub fn send_stream_batch(
        &mut self,
        id: u32,
        staged: &[u8],
        out: &mut [u8],
    ) -> Result<Transmit, Status> {
        assert!(
            self.reserved > 0,
            "send_stream_batch without a reserved token"
        );
        self.reserved -= 1;
        let cap = self.cfg.frame_size.min(out.len());
        match self.streams.send_batch(id, staged, &mut out[..cap]) {
            Ok(t) => {
                self.stats.frames_sent += 1;
                Ok(t)
            }
            Err(s) => {
                self.tokens += 1;
                Err(s)
            }
        }
    }

    /// Bytes of a frame (the most a batch may take).
    pub fn frame_size(&self) -> usize {
        self.cfg.frame_size
    }

    /// Tokens neither in use nor reserved.
    pub fn free_tokens(&self) -> u32 {
        self.tokens
    }

    /// Why the connection is dead, if it is.
    pub fn dead(&self) -> Option<&Status> {
        self.dead.as_ref()
    }

    /// Reserves a token for a later [`ClientConn::start_call`] (tower's `poll_ready`).
    /// The last free token is kept for CANCEL frames, so that a caller giving up can
    /// always tell the server, even when every other credit waits on a slow handler.
    pub fn reserve(&mut self) -> bool {
        if self.tokens <= 1 {
            self.starved = true;
            return false;
        }
        self.tokens -= 1;
        self.reserved += 1;
        true
    }

    /// Gives back a reservation that will not be used.
    pub fn unreserve(&mut self) {
        assert!(self.reserved > 0, "unreserve without reservation");
        self.reserved -= 1;
        self.tokens += 1;
    }

    /// `n` answer slots were reposted at this side: their tokens come back.
    pub fn handle_tokens_returned(&mut self, n: u32) {
        // Slots of server frames that answered nothing are the server's credits.
        let n = self.streams.absorb_reposts(n);
        // Revoked tokens' slots come back as slots, not tokens.
        let absorbed = n.min(self.debt);
        self.debt -= absorbed;
        self.tokens += n - absorbed;
        debug_assert!(self.tokens + self.reserved <= self.cfg.credits);
    }

    /// Starts a call on a reserved token, writing its first frame into `out` (the
    /// whole request when it fits: the message is encoded straight into `out`).
    /// A body that needs fragments is encoded once into memory of its own and sent
    /// from there by [`ClientConn::poll_transmit`]. A call with a timeout ends
    /// `DEADLINE_EXCEEDED` at `now + timeout` ([`ClientConn::handle_timeout`]). On
    /// error the reservation is released and nothing is sent.
    pub fn start_call(
        &mut self,
        now: impl Now,
        waiter: W,
        head: &CallHead<'_>,
        body: &dyn EncodeMessage,
        out: &mut [u8],
    ) -> Result<(u32, Transmit), Status> {
        assert!(self.reserved > 0, "start_call without a reserved token");
        let res = self.start_inner(now, waiter, head, body, out);
        if res.is_err() {
            self.unreserve();
        } else {
            self.reserved -= 1;
            self.stats.frames_sent += 1;
            if self.windows && std::mem::take(&mut self.starved) {
                out[wire::REQ_FLAGS_AT] |= wire::REQ_WANT_CREDIT;
            }
        }
        res
    }

    fn start_inner(
        &mut self,
        now: impl Now,
        waiter: W,
        head: &CallHead<'_>,
        body: &dyn EncodeMessage,
        out: &mut [u8],
    ) -> Result<(u32, Transmit), Status> {
        if let Some(s) = &self.dead {
            return Err(s.clone());
        }
        let cap = self.cfg.frame_size.min(out.len());
        let out = &mut out[..cap];
        let body_len = body.encoded_len();
        let head_len = codec::write_request(head, body_len, out)?;
        if body_len > self.cfg.max_send_message {
            return Err(Status::resource_exhausted(format!(
                "request message of {body_len} bytes exceeds the limit of {}",
                self.cfg.max_send_message
            )));
        }
        let id = self.alloc_id();
        let room = out.len() - head_len;
        let (phase, len) = if body_len <= room {
            body.encode_to(&mut out[head_len..head_len + body_len]);
            (Phase::Waiting, head_len + body_len)
        } else {
            // Too big for one slot: encode once into owned memory (bounded by
            // `max_send_message`) and push it out in slot-sized fragments.
            let v = body.encode_to_vec();
            debug_assert_eq!(v.len(), body_len);
            out[head_len..].copy_from_slice(&v[..room]);
            self.transmit.push_back(id);
            (
                Phase::Sending {
                    body: v,
                    sent: room,
                },
                out.len(),
            )
        };
        self.insert_call(now, id, waiter, head, phase, false);
        Ok((
            id,
            Transmit {
                len,
                imm: wire::imm(Kind::Req, id),
            },
        ))
    }

    /// Queues a deadline; first drops the stale entries when they outnumber the calls
    /// (each compaction removes at least half of what it visits: O(1) amortized).
    fn add_deadline(&mut self, at: Instant, id: u32) {
        if self.deadlines.len() >= 2 * self.calls.len() + 64 {
            let calls = &self.calls;
            self.deadlines
                .retain(|Reverse((at, id))| calls.get(id).is_some_and(|c| c.enforces(*at)));
        }
        self.deadlines.push(Reverse((at, id)));
    }

    fn alloc_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            // Streaming calls take the ids with `STREAM_ID_BIT`.
            self.next_id = (self.next_id + 1) & (wire::STREAM_ID_BIT - 1);
            if id != 0 && !self.calls.contains_key(&id) {
                return id;
            }
        }
    }

    /// Whether [`ClientConn::poll_transmit`] has a frame to send once a token is free.
    pub fn wants_transmit(&self) -> bool {
        !self.transmit.is_empty() || self.streams.wants_transmit() || self.want_due()
    }

    /// Whether a `WANT` frame should go: callers wait for a token, the server moves
    /// windows, and neither a `WANT` nor its refusal is outstanding.
    fn want_due(&self) -> bool {
        self.windows
            && self.starved
            && !self.want_in_flight
            && !self.want_blocked
            && self.dead.is_none()
    }

    /// Writes the next pending frame (request fragment, RFR or CANCEL) into `out`,
    /// if there is one and a free token (data frames leave the last token to CANCELs);
    /// else a `WANT` on the last token if callers wait for one (see [`wire`]).
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Option<Transmit> {
        if let Some(t) = self.poll_call_frame(out) {
            return Some(t);
        }
        if self.tokens == 0 || !self.want_due() {
            return None;
        }
        self.tokens -= 1;
        self.starved = false;
        self.want_in_flight = true;
        self.stats.frames_sent += 1;
        Some(Transmit {
            len: 0,
            imm: wire::imm(Kind::Want, 0),
        })
    }

    fn poll_call_frame(&mut self, out: &mut [u8]) -> Option<Transmit> {
        let cap = self.cfg.frame_size.min(out.len());
        let out = &mut out[..cap];
        if self.streams.wants_transmit() {
            if let Some(t) = self.streams.poll_transmit(&mut self.tokens, out) {
                self.stats.frames_sent += 1;
                return Some(t);
            }
        }
        let mut visits = self.transmit.len();
        while self.tokens > 0 && visits > 0 {
            visits -= 1;
            let id = self.transmit.pop_front()?;
            let Some(call) = self.calls.get_mut(&id) else {
                continue;
            };
            if !call.cancel && self.tokens <= 1 {
                // Only a CANCEL may take the last token; look further.
                self.transmit.push_back(id);
                continue;
            }
            let t = if call.cancel {
                call.cancel = false;
                Transmit {
                    len: 0,
                    imm: wire::imm(Kind::Cancel, id),
                }
            } else if call.rdone {
                call.rdone = false;
                Transmit {
                    len: 0,
                    imm: wire::imm(Kind::Rdone, id),
                }
            } else if let Phase::Sending { body, sent } = &mut call.phase {
                let n = (out.len() - wire::FRAG_HEAD_LEN).min(body.len() - *sent);
                wire::write_frag_head(out, *sent as u32);
                out[wire::FRAG_HEAD_LEN..][..n].copy_from_slice(&body[*sent..*sent + n]);
                *sent += n;
                if *sent == body.len() {
                    call.phase = Phase::Waiting;
                }
                Transmit {
                    len: wire::FRAG_HEAD_LEN + n,
                    imm: wire::imm(Kind::ReqFrag, id),
                }
            } else if call.rfrs > 0 {
                call.rfrs -= 1;
                Transmit {
                    len: 0,
                    imm: wire::imm(Kind::Rfr, id),
                }
            } else {
                continue;
            };
            call.awaiting += 1;
            if call.has_work() {
                self.transmit.push_back(id);
            }
            self.tokens -= 1;
            self.stats.frames_sent += 1;
            return Some(t);
        }
        None
    }

    /// Handles one received frame. A completion whose reply is [`Reply::InFrame`]
    /// borrows the frame: the caller keeps the frame's slot for the reply. Every
    /// frame, readable or not, is an answer whose slot the caller reposts, which
    /// returns its token ([`ClientConn::handle_tokens_returned`]).
    pub fn handle_frame(
        &mut self,
        _now: impl Now,
        imm: u32,
        frame: &[u8],
    ) -> Option<Completion<W>> {
        let Some((kind, id)) = wire::parse_imm(imm) else {
            self.stats.malformed += 1;
            return None;
        };
        if self.windows {
            // Read before anything else: the server counted the move when it sent
            // the answer, whatever the answer is for.
            let adjust = CreditAdjust::of(kind, frame);
            let granted = matches!(adjust, Ok(CreditAdjust::Grant(_)));
            self.on_credit(adjust);
            if kind == Kind::Cr && id == 0 && self.want_in_flight {
                // The answer to our `WANT`.
                self.want_in_flight = false;
                self.want_blocked = !granted;
                return None;
            }
            self.want_blocked = false;
        }
        let Some(call) = self.calls.get_mut(&id) else {
            if id & wire::STREAM_ID_BIT != 0 || id == 0 {
                self.streams.handle_frame(kind, id, frame);
            } else {
                self.stats.malformed += 1;
            }
            return None;
        };
        if call.awaiting == 0 {
            self.stats.malformed += 1;
            return None;
        }
        call.awaiting -= 1;
        if kind == Kind::Resp && std::mem::take(&mut call.lent) {
            // The `REQ`'s answer: the server read the request's region, or never will.
            self.released.push_back(id);
        }
        let out = match kind {
            Kind::Cr => None,
            Kind::Resp => self.on_response(id, frame),
            Kind::RespFrag => self.on_fragment(id, frame),
            _ => {
                self.stats.malformed += 1;
                None
            }
        };
        self.maybe_forget(id);
        out
    }

    /// A grant is a token now (the driver grows its receives to the window before
    /// it sends again); a revoke takes the answer's token back when its slot is
    /// reposted.
    fn on_credit(&mut self, adjust: Result<CreditAdjust, wire::Malformed>) {
        match adjust {
            Ok(CreditAdjust::Keep) => {}
            Ok(CreditAdjust::Grant(n)) if self.cfg.credits + u32::from(n) <= self.max_window => {
                self.cfg.credits += u32::from(n);
                self.tokens += u32::from(n);
            }
            Ok(CreditAdjust::Revoke) if self.cfg.credits > crate::engine::credit::MIN_WINDOW => {
                self.cfg.credits -= 1;
                self.debt += 1;
            }
            Ok(_) | Err(_) => self.stats.malformed += 1,
        }
    }

    fn on_response(&mut self, id: u32, frame: &[u8]) -> Option<Completion<W>> {
        let cfg = self.cfg;
        let call = self.calls.get_mut(&id).expect("caller checked");
        if call.waiter.is_none() {
            // Retired (cancelled or timed out): its CANCEL, sent after the request and
            // so reaching the server after it, already released anything the server
            // still held for this reply.
            self.stats.late_replies += 1;
            call.phase = Phase::Done;
            return None;
        }
        if !matches!(call.phase, Phase::Waiting | Phase::Sending { .. }) {
            self.stats.malformed += 1;
            return None;
        }
        // A response may come early, mid-request (e.g. RESOURCE_EXHAUSTED): stop pushing.
        call.phase = Phase::Done;
        let start = match codec::read_response(frame) {
            Ok(start) => start,
            Err(s) => {
                // The server may hold the rest of the body: tell it to forget it.
                self.stats.malformed += 1;
                self.queue_cancel(id);
                return self.finish(id, Err(s));
            }
        };
        if let Some(desc) = start.by_ref {
            return self.read_response(id, start.outcome, desc, start.gather);
        }
        if start.body.len() == start.body_len {
            let result = start
                .outcome
                .finish(start.body, |b| Bytes::copy_from_slice(&frame[b]))
                .map(|(metadata, body)| Reply::InFrame { metadata, body });
            return self.finish(id, result);
        }
        if start.body_len > cfg.max_recv_message {
            self.queue_cancel(id);
            let status = match start.outcome {
                Outcome::Ok(_) => Status::resource_exhausted(format!(
                    "response message of {} bytes exceeds the limit of {}",
                    start.body_len, cfg.max_recv_message
                )),
                Outcome::Status(s) => {
                    // The server's status still ends the call, without its details.
                    self.stats.details_dropped += 1;
                    tracing::warn!(
                        code = ?s.code(),
                        details_bytes = start.body_len,
                        limit = cfg.max_recv_message,
                        "status details exceed the max message; delivered without them"
                    );
                    s
                }
            };
            return self.finish(id, Err(status));
        }
        let mut body = Vec::with_capacity(start.body_len);
        body.extend_from_slice(&frame[start.body]);
        let rest = start.body_len - body.len();
        let call = self.calls.get_mut(&id).expect("present");
        call.rfrs = rest.div_ceil(cfg.frame_size - wire::FRAG_HEAD_LEN) as u32;
        call.phase = Phase::Pulling {
            outcome: start.outcome,
            body,
            expected: start.body_len,
        };
        self.transmit.push_back(id);
        None
    }

    /// A `RESP` whose body is by reference: queued for the driver's Read, unless
    /// this side cannot read or the body is over its limit (then a `CANCEL` tells the
    /// server to release the region).
    fn read_response(
        &mut self,
        id: u32,
        outcome: Outcome,
        desc: Descriptor,
        gather: Option<crate::engine::gather::Gather>,
    ) -> Option<Completion<W>> {
        let len = desc.len as usize;
        let refused = if self.rendezvous.is_none() {
            self.stats.malformed += 1;
            Some(Status::internal(
                "response body by reference on a connection without RDMA Read",
            ))
        } else if len > self.cfg.max_recv_message {
            Some(Status::resource_exhausted(format!(
                "response message of {len} bytes exceeds the limit of {}",
                self.cfg.max_recv_message
            )))
        } else {
            None
        };
        if let Some(s) = refused {
            self.queue_cancel(id);
            return self.finish(id, Err(s));
        }
        let call = self.calls.get_mut(&id).expect("caller checked");
        call.phase = Phase::Reading { outcome };
        self.reads.push_back(ReadOp {
            id,
            desc,
            gather,
            head_len: 0,
        });
        None
    }

    fn on_fragment(&mut self, id: u32, frame: &[u8]) -> Option<Completion<W>> {
        let call = self.calls.get_mut(&id).expect("caller checked");
        let Phase::Pulling { body, expected, .. } = &mut call.phase else {
            // Fragments of a cancelled pull still in flight.
            if call.waiter.is_none() {
                self.stats.late_replies += 1;
            } else {
                self.stats.malformed += 1;
            }
            return None;
        };
        let bad = match wire::read_frag(frame) {
            Ok((off, chunk))
                if off as usize == body.len() && chunk.len() <= *expected - body.len() =>
            {
                body.extend_from_slice(chunk);
                None
            }
            Ok(_) => Some("response fragment out of place"),
            Err(e) => Some(e.0),
        };
        if let Some(why) = bad {
            self.stats.malformed += 1;
            self.queue_cancel(id);
            return self.finish(id, Err(Status::internal(why)));
        }
        let call = self.calls.get_mut(&id).expect("present");
        let Phase::Pulling { body, expected, .. } = &call.phase else {
            unreachable!()
        };
        if body.len() == *expected {
            let Phase::Pulling { outcome, body, .. } =
                std::mem::replace(&mut call.phase, Phase::Done)
            else {
                unreachable!()
            };
            let result = outcome
                .finish(body, Bytes::from)
                .map(|(metadata, body)| Reply::Owned { metadata, body });
            return self.finish(id, result);
        }
        if call.rfrs == 0 && call.awaiting == 0 {
            self.queue_cancel(id);
            return self.finish(id, Err(Status::internal("response shorter than announced")));
        }
        None
    }

    /// Retires `id` with `result`, returning its completion if it still had a waiter.
    fn finish(&mut self, id: u32, result: Result<Reply, Status>) -> Option<Completion<W>> {
        let call = self.calls.get_mut(&id)?;
        call.waiter
            .take()
            .map(|waiter| Completion { id, waiter, result })
    }

    fn queue_cancel(&mut self, id: u32) {
        if let Some(call) = self.calls.get_mut(&id) {
            call.rfrs = 0;
            call.phase = Phase::Done;
            call.cancel = true;
            if !self.transmit.contains(&id) {
                self.transmit.push_back(id);
            }
        }
    }

    /// Drops a retired call once the server owes it nothing and it has nothing to send.
    fn maybe_forget(&mut self, id: u32) {
        if let Some(c) = self.calls.get(&id) {
            if c.waiter.is_none() && c.awaiting == 0 && !c.has_work() {
                self.calls.remove(&id);
            }
        }
    }

    /// The caller gave up on `id` (its future was dropped, or its timer fired): the
    /// waiter is dropped, the server is told to forget a half-sent request or a
    /// half-pulled response, and a late reply will be dropped and counted.
    pub fn cancel(&mut self, id: u32) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let was_done = matches!(call.phase, Phase::Done);
        call.waiter = None;
        if !was_done && self.dead.is_none() {
            // Mid-request or mid-response the server holds buffers; while waiting it
            // runs the handler. Either way a CANCEL lets it stop and answer at once,
            // which brings the call's credit back without waiting for the handler.
            self.queue_cancel(id);
        }
        self.maybe_forget(id);
    }

    /// The earliest deadline of an open call: when [`ClientConn::handle_timeout`]
    /// has work. O(1), after dropping the stale entries at the top of the heap (each
    /// dropped once). Calls started without a timeout are not in it.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let stream = self.streams.poll_timeout();
        while let Some(&Reverse((at, id))) = self.deadlines.peek() {
            if self.calls.get(&id).is_some_and(|c| c.enforces(at)) {
                return Some(stream.map_or(at, |s| s.min(at)));
            }
            self.deadlines.pop();
        }
        stream
    }

    /// Ends every open call whose deadline is at or before `now` with
    /// `DEADLINE_EXCEEDED` (drained with [`ClientConn::poll_completion`]) and tells
    /// the server, as [`ClientConn::cancel`] does. Touches only the due entries.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.streams.handle_timeout(now);
        while let Some(&Reverse((at, id))) = self.deadlines.peek() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            let Some((_, timeout)) = self
                .calls
                .get(&id)
                .filter(|c| c.enforces(at))
                .and_then(|c| c.deadline)
            else {
                continue;
            };
            let status = Status::deadline_exceeded(format!("deadline of {timeout:?} exceeded"));
            if let Some(c) = self.finish(id, Err(status)) {
                self.completions.push_back(c);
            }
            self.cancel(id);
        }
    }

    #[cfg(test)]
    pub(crate) fn deadline_entries(&self) -> usize {
        self.deadlines.len()
    }

    /// The peer is gone: every open call ends with `status`, later calls fail with it.
    pub fn handle_peer_lost(&mut self, status: Status) {
        for (id, mut c) in self.calls.drain() {
            if let Some(waiter) = c.waiter.take() {
                self.completions.push_back(Completion {
                    id,
                    waiter,
                    result: Err(status.clone()),
                });
            }
        }
        self.transmit.clear();
        self.deadlines.clear();
        self.reads.clear();
        self.released.clear();
        self.streams.handle_peer_lost(&status);
        self.dead = Some(status);
    }

    /// Completions produced by timeouts and a lost peer.
    pub fn poll_completion(&mut self) -> Option<Completion<W>> {
        self.completions.pop_front()
    }
}
