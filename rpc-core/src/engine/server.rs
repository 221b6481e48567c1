//! The server side of one connection: reassembly, answers, response fragments.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::engine::codec::{self, StatusCuts};
use crate::engine::credit::CreditWindow;
use crate::engine::gather::ByRef;
use crate::engine::rendezvous::{ReadOp, STREAM_READ_TAG};
use crate::engine::stream::server::{ServerStreamEvent, ServerStreams};
use crate::engine::wire::{self, Descriptor, Kind};
use crate::engine::{Now, Transmit, MIN_FRAME};
use crate::id_map::IdMap;
use crate::metadata::MetadataMap;
use crate::server::EncodeMessage;
use crate::status::Status;

/// Limits of a server connection.
#[derive(Debug, Clone, Copy)]
pub struct ServerConfig {
    /// Largest frame in bytes (the agreed slot size).
    pub frame_size: usize,
    /// Largest request body accepted (beyond: `RESOURCE_EXHAUSTED`).
    pub max_recv_message: usize,
    /// Largest response body sent (beyond: `RESOURCE_EXHAUSTED` to the client).
    pub max_send_message: usize,
    /// Bytes this connection may hold at once in reassembly and pending responses.
    pub buffer_cap: usize,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Frames that could not be read or did not fit the protocol.
    pub malformed: u64,
    /// Calls handed to the application.
    pub dispatched: u64,
    /// Calls or responses forgotten because the client cancelled them.
    pub cancelled: u64,
    /// What fitting statuses into frames cut or dropped (see [`codec`]).
    pub cuts: StatusCuts,
    /// Requests read by reference (RDMA Read).
    pub by_ref_in: u64,
    /// Responses lent by reference.
    pub by_ref_out: u64,
}

/// Where a dispatched request's bytes are.
#[derive(Debug)]
pub enum RequestBody {
    /// In the frame just handled: keep its slot.
    InFrame,
    /// Reassembled: path, metadata and body in one buffer (ranges as in the frame).
    Owned(Vec<u8>),
    /// Read by reference into a pooled region: path and metadata copied to its head,
    /// the body read after them (ranges as in the frame, the body after the head).
    Shared(Bytes),
}

/// A complete request for the application.
#[derive(Debug)]
pub struct Incoming {
    /// Call id.
    pub id: u32,
    /// Where the bytes are.
    pub bytes: RequestBody,
    /// Range of the path.
    pub path: Range<usize>,
    /// Range of the body.
    pub body: Range<usize>,
    /// Decoded request metadata.
    pub metadata: MetadataMap,
    /// Time left for the call, as the client sent it.
    pub timeout: Option<Duration>,
    /// A streaming call: its messages follow (the body is empty), and its answer is
    /// [`ServerConn::respond_stream`].
    pub streaming: bool,
}

/// A call's state at the server. The states of messages beyond one frame are boxed,
/// so that the table of a connection's calls holds 24 bytes per call, not ~120: a
/// small call's entry is `Running`, and a connection's first table (4 entries) then
/// fits in 128 bytes, the size of allocations a connection's other small state
/// already takes (capacity-probe: each distinct size a closed connection frees
/// keeps pages of the server's heap resident in glibc's per-thread caches).
#[derive(Debug)]
enum Call {
    /// The request's body is arriving in fragments.
    Receiving(Box<Receiving>),
    /// With the application; its answer is the response.
    Running,
    /// The response's body (or a status's details), pulled by RFRs.
    Responding(Box<Responding>),
    /// The request's body is being read by reference; the `REQ` is answered once
    /// the Read ended (the client's region is in use until then).
    Reading(Box<Reading>),
    /// The response was lent by reference: the region stays the client's to read
    /// until its `RDONE` or `CANCEL` (or the connection's end).
    Lent,
}

#[derive(Debug)]
struct Receiving {
    buf: Vec<u8>,
    path: Range<usize>,
    body_start: usize,
    metadata: MetadataMap,
    timeout: Option<Duration>,
    total: usize,
}

#[derive(Debug)]
struct Responding {
    body: Bytes,
    /// Bytes of `body` sent so far.
    sent: usize,
}

#[derive(Debug)]
struct Reading {
    path: Range<usize>,
    body_start: usize,
    metadata: MetadataMap,
    timeout: Option<Duration>,
    /// The client cancelled meanwhile: answer `CANCELLED` once the Read ended.
    cancelled: bool,
}

/// The answer a client frame is owed (every client frame gets exactly one), when it
/// is not the handler's response.
#[derive(Debug)]
enum FrameAnswer {
    /// A credit return: nothing to say.
    Credit,
    /// A status the engine decided (a rejected request, a cancelled call).
    Status(Status),
    /// The next fragment of a response (the answer to an `RFR`).
    Fragment,
}

/// One server connection's protocol state. Every client frame gets exactly one
/// answer (see [`crate::engine::wire`]); this side never sends anything else.
#[derive(Debug)]
pub struct ServerConn {
    cfg: ServerConfig,
    calls: IdMap<u32, Call>,
    answers: VecDeque<(u32, FrameAnswer)>,
    buffered: usize,
    /// Running calls the client cancelled (the driver may stop their handlers).
    cancelled: VecDeque<u32>,
    stats: ServerStats,
    /// Streaming calls: a table of their own, so that unary calls pay nothing.
    streams: ServerStreams,
    /// The client's credit window (fixed unless the driver makes it dynamic).
    credit: CreditWindow,
    /// Bodies longer than this go by reference (both sides agreed on RDMA Read);
    /// `None`: never, and a body by reference from the client is malformed.
    rendezvous: Option<usize>,
    /// Reads of request bodies for the driver to perform.
    reads: VecDeque<ReadOp>,
    /// Calls whose lent response region the driver may reuse.
    released: VecDeque<u32>,
}

impl ServerConn {
    /// A connection with these limits.
    ///
    /// # Panics
    /// If `cfg.frame_size` is below [`MIN_FRAME`].
    pub fn new(cfg: ServerConfig) -> Self {
        assert!(cfg.frame_size >= MIN_FRAME);
        ServerConn {
            cfg,
            calls: IdMap::default(),
            answers: VecDeque::new(),
            buffered: 0,
            cancelled: VecDeque::new(),
            stats: ServerStats::default(),
            streams: ServerStreams::new(cfg.max_recv_message, cfg.max_send_message),
            credit: CreditWindow::fixed(0),
            rendezvous: None,
            reads: VecDeque::new(),
            released: VecDeque::new(),
        }
    }

    /// Each streaming call lets the client send up to `size` bytes of messages
    /// (their charges) ahead of its handler: at least the wire's `STREAM_WINDOW`,
    /// granted beyond it as the call opens.
    pub fn set_stream_window(&mut self, size: u32) {
        self.streams.set_window(size);
    }

    /// Lets bodies travel by reference (both sides offered RDMA Read): responses
    /// longer than `threshold` bytes are lent ([`ServerConn::respond_by_ref`]), and
    /// requests by reference are read ([`ServerConn::poll_read`]).
    pub fn set_rendezvous(&mut self, threshold: usize) {
        self.rendezvous = Some(threshold);
        self.streams.agree_by_ref();
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

    /// Whether a response of `body_len` bytes should be lent by reference rather
    /// than sent inline or in fragments.
    pub fn response_by_ref(&self, body_len: usize) -> bool {
        self.rendezvous.is_some_and(|t| body_len > t)
            && body_len <= self.cfg.max_send_message
            && u32::try_from(body_len).is_ok()
    }

    /// The next request body to read by RDMA Read (then
    /// [`ServerConn::handle_read_done`]).
    pub fn poll_read(&mut self) -> Option<ReadOp> {
        self.reads.pop_front().or_else(|| self.streams.poll_read())
    }

    /// The Read of call `id`'s request body ended: with the request's head and body
    /// (`head_and_body`: the frame's bytes up to the body, then the body, sharing a
    /// pooled region), the call comes back for dispatch; with an error, the `REQ`
    /// is answered with it. Either way the client may now reuse its region.
    pub fn handle_read_done(&mut self, id: u32, result: Result<Bytes, Status>) -> Option<Incoming> {
        if id & STREAM_READ_TAG != 0 {
            // A stream message: its call's events say what became of it.
            self.streams.handle_read_done(id, result);
            return None;
        }
        let Some(Call::Reading(_)) = self.calls.get(&id) else {
            return None;
        };
        let Some(Call::Reading(reading)) = self.calls.remove(&id) else {
            unreachable!()
        };
        let Reading {
            path,
            body_start,
            metadata,
            timeout,
            cancelled,
        } = *reading;
        if cancelled {
            self.answers.push_back((
                id,
                FrameAnswer::Status(Status::cancelled("cancelled by the client")),
            ));
            return None;
        }
        match result {
            Err(s) => {
                self.answers.push_back((id, FrameAnswer::Status(s)));
                None
            }
            Ok(bytes) => {
                self.calls.insert(id, Call::Running);
                self.stats.dispatched += 1;
                self.stats.by_ref_in += 1;
                let body = body_start..bytes.len();
                Some(Incoming {
                    id,
                    bytes: RequestBody::Shared(bytes),
                    path,
                    body,
                    metadata,
                    timeout,
                    streaming: false,
                })
            }
        }
    }

    /// The next call whose lent response region the driver may reuse (the client
    /// read it, or cancelled the call).
    pub fn poll_released(&mut self) -> Option<u32> {
        self.released.pop_front()
    }

    /// The next address of a stream message lent to the client that the driver may
    /// reuse (the client sent its `RDONE`).
    pub fn poll_released_message(&mut self) -> Option<u64> {
        self.streams.poll_released()
    }

    /// Calls whose request is being read or whose response is lent (their regions
    /// are in use).
    pub fn by_ref_in_flight(&self) -> usize {
        self.calls
            .iter()
            .filter(|(_, c)| matches!(c, Call::Reading(_) | Call::Lent))
            .count()
    }

    /// Sets the client's credit window (what the handshake granted, and whether it
    /// moves); a dynamic one is then moved with [`ServerConn::credit_mut`].
    pub fn set_credit(&mut self, w: CreditWindow) {
        self.credit = w;
    }

    /// The client's credit window.
    pub fn credit(&self) -> &CreditWindow {
        &self.credit
    }

    /// The client's credit window, to set its target or reservation.
    pub fn credit_mut(&mut self) -> &mut CreditWindow {
        &mut self.credit
    }

    /// Stamps an answer just written into `out` with the window's next move
    /// (`RESP`: flag bits; `CR`: one payload byte).
    fn stamp_credit(&mut self, out: &mut [u8], mut t: Transmit) -> Transmit {
        let kind = t.imm >> wire::CALL_ID_BITS;
        let at = if kind == Kind::Resp as u32 {
            wire::RESP_FLAGS_AT
        } else if kind == Kind::Cr as u32 {
            0
        } else {
            return t;
        };
        if at == 0 {
            // A `CR` had no payload: it may grant many at once.
            t.len = self.credit.next_adjust(u8::MAX).write_cr(out);
        } else {
            out[at] |= self.credit.next_adjust(1).bits();
        }
        t
    }

    /// Counters.
    pub fn stats(&self) -> ServerStats {
        let mut s = self.stats;
        s.malformed += self.streams.malformed;
        s
    }

    /// The streaming calls: their events and what their handlers do to them.
    pub fn streams(&mut self) -> &mut ServerStreams {
        &mut self.streams
    }

    /// The next event of a streaming call.
    pub fn poll_stream_event(&mut self) -> Option<(u32, ServerStreamEvent)> {
        self.streams.poll_event()
    }

    /// Answers a streaming call's `REQ`: its response headers (the call goes on)
    /// or a status (trailers-only: the call ends). `None` if there is nothing to send.
    pub fn respond_stream(
        &mut self,
        id: u32,
        result: Result<&MetadataMap, Status>,
        out: &mut [u8],
    ) -> Option<Transmit> {
        let cap = self.cfg.frame_size.min(out.len());
        self.streams
            .respond(id, result, &mut out[..cap], &mut self.stats.cuts)
    }

    /// Sends a message of streaming call `id` into `out`, a free send slot (see
    /// [`ServerStreams::can_send`]).
    pub fn send_stream_message(
        &mut self,
        id: u32,
        len: usize,
        encode: impl FnOnce(&mut [u8]),
        out: &mut [u8],
    ) -> Result<Transmit, Status> {
        let cap = self.cfg.frame_size.min(out.len());
        self.streams.send_message(id, len, encode, &mut out[..cap])
    }

    /// Sends a message of streaming call `id` by reference into `out`, a free send
    /// slot: the driver encoded its `desc.len` bytes into a region it lends until
    /// [`ServerConn::poll_released_message`] names `desc.addr` (or the connection
    /// ends). On error the region is free.
    pub fn send_stream_message_by_ref(
        &mut self,
        id: u32,
        desc: Descriptor,
        out: &mut [u8],
    ) -> Result<Transmit, Status> {
        if self.rendezvous.is_none() {
            return Err(Status::failed_precondition(
                "no RDMA Read on this connection",
            ));
        }
        self.streams.send_message_by_ref(id, desc, out)
    }

    /// Sends a batch of whole messages of streaming call `id`, packed into `staged`
    /// (see [`ServerStreams::send_credit`]), as one frame into `out`, a free send slot.
    pub fn send_stream_batch(
        &mut self,
        id: u32,
        staged: &[u8],
        out: &mut [u8],
    ) -> Result<Transmit, Status> {
        let cap = self.cfg.frame_size.min(out.len());
        self.streams.send_batch(id, staged, &mut out[..cap])
    }

    /// Bytes of a frame (the most a batch may take).
    pub fn frame_size(&self) -> usize {
        self.cfg.frame_size
    }

    /// Bytes held in reassembly and pending responses.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// Calls in the table, streaming calls included.
    pub fn calls(&self) -> usize {
        self.calls.len() + self.streams.len()
    }

    /// Handles one received frame; a complete request is returned for dispatch (its
    /// answer is the later [`ServerConn::respond`]); any other answer is queued for
    /// [`ServerConn::poll_transmit`]. Nothing a client sends makes this panic.
    pub fn handle_frame(&mut self, now: impl Now, imm: u32, frame: &[u8]) -> Option<Incoming> {
        let kind_bits = imm >> wire::CALL_ID_BITS;
        let wants = kind_bits == Kind::Want as u32
            || kind_bits == Kind::Req as u32
                && frame
                    .get(wire::REQ_FLAGS_AT)
                    .is_some_and(|f| f & wire::REQ_WANT_CREDIT != 0);
        self.credit.on_frame(wants);
        let Some((kind, id)) = wire::parse_imm(imm) else {
            self.stats.malformed += 1;
            self.answers
                .push_back((imm & wire::CALL_ID_MASK, FrameAnswer::Credit));
            return None;
        };
        match kind {
            Kind::Req => self.on_request(now, id, frame),
            Kind::ReqFrag => self.on_fragment(id, frame),
            Kind::Rfr => {
                if matches!(self.calls.get(&id), Some(Call::Responding(_))) {
                    self.answers.push_back((id, FrameAnswer::Fragment));
                } else {
                    self.stats.malformed += 1;
                    self.answers.push_back((id, FrameAnswer::Credit));
                }
                None
            }
            Kind::Rdone => {
                if id == 0 {
                    // A stream message's region (counted by the streams if bad).
                    self.streams.on_rdone(frame);
                } else if matches!(self.calls.get(&id), Some(Call::Lent)) {
                    self.calls.remove(&id);
                    self.released.push_back(id);
                } else {
                    self.stats.malformed += 1;
                }
                self.answers.push_back((id, FrameAnswer::Credit));
                None
            }
            Kind::Cancel => {
                match self.calls.get_mut(&id) {
                    Some(Call::Receiving(_) | Call::Responding(_)) => {
                        self.forget(id);
                        self.stats.cancelled += 1;
                    }
                    Some(Call::Reading(reading)) => {
                        // The Read still uses the client's region: the `REQ` is
                        // answered `CANCELLED` when it ends.
                        reading.cancelled = true;
                        self.stats.cancelled += 1;
                    }
                    Some(Call::Lent) => {
                        self.calls.remove(&id);
                        self.released.push_back(id);
                        self.stats.cancelled += 1;
                    }
                    Some(Call::Running) => {
                        // The request's answer goes now; the handler's later
                        // `respond` finds the call gone and sends nothing.
                        self.calls.remove(&id);
                        self.stats.cancelled += 1;
                        self.cancelled.push_back(id);
                        self.answers.push_back((
                            id,
                            FrameAnswer::Status(Status::cancelled("cancelled by the client")),
                        ));
                    }
                    None => {}
                }
                self.answers.push_back((id, FrameAnswer::Credit));
                None
            }
            Kind::Msg | Kind::HalfClose | Kind::Reset | Kind::Credit => {
                self.streams.handle_frame(kind, id, frame);
                self.answers.push_back((id, FrameAnswer::Credit));
                None
            }
            Kind::Want => {
                // Noted above; the answer carries what the driver grants.
                self.answers.push_back((id, FrameAnswer::Credit));
                None
            }
            Kind::Resp | Kind::RespFrag | Kind::Cr | Kind::InProgress | Kind::Trailers => {
                self.stats.malformed += 1;
                self.answers.push_back((id, FrameAnswer::Credit));
                None
            }
        }
    }

    fn reject(&mut self, id: u32, status: Status) -> Option<Incoming> {
        self.answers.push_back((id, FrameAnswer::Status(status)));
        None
    }

    fn on_request(&mut self, now: impl Now, id: u32, frame: &[u8]) -> Option<Incoming> {
        if self.calls.contains_key(&id) || self.streams.contains(id) {
            // A client bug; the call that owns the id keeps it.
            self.stats.malformed += 1;
            self.answers.push_back((id, FrameAnswer::Credit));
            return None;
        }
        let start = match codec::read_request(frame) {
            Ok(start) => start,
            Err(s) => {
                self.stats.malformed += 1;
                return self.reject(id, s);
            }
        };
        let total = start.body_len;
        if wire::request_is_stream(frame) {
            return self.open_stream(now.now(), id, start);
        }
        if total > self.cfg.max_recv_message {
            return self.reject(
                id,
                Status::resource_exhausted(format!(
                    "request message of {total} bytes exceeds the limit of {}",
                    self.cfg.max_recv_message
                )),
            );
        }
        let body_start = start.body.start;
        if let Some(desc) = start.by_ref {
            return self.read_request(id, start, desc);
        }
        if start.body.len() == total {
            self.calls.insert(id, Call::Running);
            self.stats.dispatched += 1;
            return Some(Incoming {
                id,
                bytes: RequestBody::InFrame,
                path: start.path,
                body: start.body,
                metadata: start.metadata,
                timeout: start.timeout,
                streaming: false,
            });
        }
        let need = body_start + total;
        if self.buffered + need > self.cfg.buffer_cap {
            return self.reject(
                id,
                Status::resource_exhausted(format!(
                    "connection already buffers {} bytes; {need} more exceed its cap of {}",
                    self.buffered, self.cfg.buffer_cap
                )),
            );
        }
        self.buffered += need;
        let mut buf = Vec::with_capacity(need);
        buf.extend_from_slice(frame);
        self.calls.insert(
            id,
            Call::Receiving(Box::new(Receiving {
                buf,
                path: start.path,
                body_start,
                metadata: start.metadata,
                timeout: start.timeout,
                total,
            })),
        );
        self.answers.push_back((id, FrameAnswer::Credit));
        None
    }

    fn on_fragment(&mut self, id: u32, frame: &[u8]) -> Option<Incoming> {
        let Some(Call::Receiving(r)) = self.calls.get_mut(&id) else {
            // Fragments still in flight after an early rejection or a cancel.
            self.answers.push_back((id, FrameAnswer::Credit));
            return None;
        };
        let have = r.buf.len() - r.body_start;
        match wire::read_frag(frame) {
            Ok((off, chunk)) if off as usize == have && chunk.len() <= r.total - have => {
                r.buf.extend_from_slice(chunk);
            }
            _ => {
                self.stats.malformed += 1;
                self.forget(id);
                return self.reject(id, Status::internal("malformed request fragment"));
            }
        }
        if r.buf.len() - r.body_start < r.total {
            self.answers.push_back((id, FrameAnswer::Credit));
            return None;
        }
        let Some(Call::Receiving(r)) = self.calls.insert(id, Call::Running) else {
            unreachable!()
        };
        let Receiving {
            buf,
            path,
            body_start,
            metadata,
            timeout,
            ..
        } = *r;
        self.buffered -= buf.len();
        self.stats.dispatched += 1;
        let body = body_start..buf.len();
        Some(Incoming {
            id,
            bytes: RequestBody::Owned(buf),
            path,
            body,
            metadata,
            timeout,
            streaming: false,
        })
    }

    /// A `REQ` whose body is by reference: queued for the driver's Read.
    fn read_request(
        &mut self,
        id: u32,
        start: codec::RequestStart,
        desc: Descriptor,
    ) -> Option<Incoming> {
        if self.rendezvous.is_none() {
            self.stats.malformed += 1;
            return self.reject(
                id,
                Status::internal("request body by reference on a connection without RDMA Read"),
            );
        }
        self.calls.insert(
            id,
            Call::Reading(Box::new(Reading {
                path: start.path,
                body_start: start.body.start,
                metadata: start.metadata,
                timeout: start.timeout,
                cancelled: false,
            })),
        );
        self.reads.push_back(ReadOp {
            id,
            desc,
            gather: start.gather,
            head_len: start.body.start,
        });
        None
    }

    /// A `REQ` flagged `STREAM`: a streaming call opens (its body must be empty:
    /// messages come as `MSG`s), with its deadline counted from `now`.
    fn open_stream(
        &mut self,
        now: Instant,
        id: u32,
        start: codec::RequestStart,
    ) -> Option<Incoming> {
        if start.body_len != 0 {
            self.stats.malformed += 1;
            return self.reject(id, Status::internal("streaming request with a body"));
        }
        self.streams.open(id, now, start.timeout);
        self.stats.dispatched += 1;
        Some(Incoming {
            id,
            bytes: RequestBody::InFrame,
            path: start.path,
            body: start.body,
            metadata: start.metadata,
            timeout: start.timeout,
            streaming: true,
        })
    }

    fn forget(&mut self, id: u32) {
        match self.calls.remove(&id) {
            Some(Call::Receiving(r)) => self.buffered -= r.body_start + r.total,
            Some(Call::Responding(r)) => self.buffered -= r.body.len(),
            _ => {}
        }
    }

    /// The next running call the client cancelled: its handler's work is wasted, and
    /// its answer has already been queued.
    pub fn poll_cancelled(&mut self) -> Option<u32> {
        self.cancelled.pop_front()
    }

    /// Whether [`ServerConn::poll_transmit`] has an answer to write.
    pub fn wants_transmit(&self) -> bool {
        !self.answers.is_empty() || self.streams.wants_transmit()
    }

    /// Writes the application's answer to call `id` into `out`: the response head
    /// and, when it fits, the whole message encoded in place; a larger message is
    /// encoded once into owned memory and pulled from there. A status goes with its
    /// metadata and, as the body, its details, fitted by [`codec`]'s rule. `None` if
    /// the call is not running (the connection forgot it).
    pub fn respond(
        &mut self,
        id: u32,
        result: Result<(&MetadataMap, &dyn EncodeMessage), Status>,
        out: &mut [u8],
    ) -> Option<Transmit> {
        let t = self.write_response(id, result, out)?;
        Some(self.stamp_credit(out, t))
    }

    /// Answers call `id` with an OK response whose body the driver lends to the
    /// client, described by `body` (a descriptor of the region it encoded it into,
    /// or a gather list): the `RESP` carries it in place of the body.
    /// `Some((t, true))`: the body is
    /// lent until [`ServerConn::poll_released`] names the call; `Some((t, false))`:
    /// a status went instead (the metadata did not fit) and the region is free now;
    /// `None`: the call is not running (the region is free).
    pub fn respond_by_ref(
        &mut self,
        id: u32,
        metadata: &MetadataMap,
        body: ByRef<'_>,
        out: &mut [u8],
    ) -> Option<(Transmit, bool)> {
        if !matches!(self.calls.get(&id), Some(Call::Running)) {
            return None;
        }
        self.calls.remove(&id);
        let cap = self.cfg.frame_size.min(out.len());
        let out = &mut out[..cap];
        let body_len = body.body_len();
        let written = codec::write_response(metadata, body_len, out).and_then(|n| {
            (n + body.wire_len() <= out.len())
                .then_some(n)
                .ok_or_else(|| Status::resource_exhausted("response metadata does not fit a frame"))
        });
        let (t, lent) = match written {
            Ok(n) => {
                out[wire::RESP_FLAGS_AT] |= body.flags();
                body.write(&mut out[n..]);
                self.calls.insert(id, Call::Lent);
                self.stats.by_ref_out += 1;
                let t = Transmit {
                    len: n + body.wire_len(),
                    imm: wire::imm(Kind::Resp, id),
                };
                (t, true)
            }
            Err(s) => (self.write_status(id, &s, out, true), false),
        };
        Some((self.stamp_credit(out, t), lent))
    }

    fn write_response(
        &mut self,
        id: u32,
        result: Result<(&MetadataMap, &dyn EncodeMessage), Status>,
        out: &mut [u8],
    ) -> Option<Transmit> {
        if !matches!(self.calls.get(&id), Some(Call::Running)) {
            return None;
        }
        self.calls.remove(&id);
        let cap = self.cfg.frame_size.min(out.len());
        let out = &mut out[..cap];
        let (metadata, msg) = match result {
            Ok(ok) => ok,
            Err(s) => return Some(self.write_status(id, &s, out, true)),
        };
        let body_len = msg.encoded_len();
        if body_len > self.cfg.max_send_message {
            let s = Status::resource_exhausted(format!(
                "response message of {body_len} bytes exceeds the limit of {}",
                self.cfg.max_send_message
            ));
            return Some(self.write_status(id, &s, out, true));
        }
        let head_len = match codec::write_response(metadata, body_len, out) {
            Ok(n) => n,
            Err(s) => return Some(self.write_status(id, &s, out, true)),
        };
        let room = out.len() - head_len;
        if body_len <= room {
            msg.encode_to(&mut out[head_len..head_len + body_len]);
            return Some(Transmit {
                len: head_len + body_len,
                imm: wire::imm(Kind::Resp, id),
            });
        }
        if self.buffered + body_len > self.cfg.buffer_cap {
            let s = Status::resource_exhausted("server connection buffer cap reached");
            return Some(self.write_status(id, &s, out, true));
        }
        let body = Bytes::from(msg.encode_to_vec());
        debug_assert_eq!(body.len(), body_len);
        out[head_len..].copy_from_slice(&body[..room]);
        self.buffered += body.len();
        self.calls.insert(
            id,
            Call::Responding(Box::new(Responding { body, sent: room })),
        );
        Some(Transmit {
            len: out.len(),
            imm: wire::imm(Kind::Resp, id),
        })
    }

    /// A final status for call `id`. With `pull`, details beyond the frame are kept
    /// for the client to pull (within the max message and the buffer cap); without,
    /// nobody will pull them (the call is gone), so only what fits the frame goes.
    fn write_status(&mut self, id: u32, s: &Status, out: &mut [u8], pull: bool) -> Transmit {
        let fragments = pull.then(|| {
            let free = self.cfg.buffer_cap.saturating_sub(self.buffered);
            self.cfg.max_send_message.min(free)
        });
        let f = codec::write_status(s, fragments, out, &mut self.stats.cuts);
        if f.details_sent < f.details_len {
            let body = s.details_bytes().clone();
            self.buffered += body.len();
            self.calls.insert(
                id,
                Call::Responding(Box::new(Responding {
                    body,
                    sent: f.details_sent,
                })),
            );
        }
        Transmit {
            len: f.len,
            imm: wire::imm(Kind::Resp, id),
        }
    }

    /// Writes the next queued answer (credit return, error status, response
    /// fragment) into `out`.
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Option<Transmit> {
        let t = self.write_answer(out)?;
        Some(self.stamp_credit(out, t))
    }

    fn write_answer(&mut self, out: &mut [u8]) -> Option<Transmit> {
        let cap = self.cfg.frame_size.min(out.len());
        let out = &mut out[..cap];
        let Some((id, a)) = self.answers.pop_front() else {
            return self.streams.poll_transmit(out, &mut self.stats.cuts);
        };
        Some(match a {
            FrameAnswer::Credit => Transmit {
                len: 0,
                imm: wire::imm(Kind::Cr, id),
            },
            FrameAnswer::Status(s) => self.write_status(id, &s, out, false),
            FrameAnswer::Fragment => {
                let Some(Call::Responding(r)) = self.calls.get_mut(&id) else {
                    // Cancelled between the RFR and now: the RFR still needs its answer.
                    return Some(Transmit {
                        len: 0,
                        imm: wire::imm(Kind::Cr, id),
                    });
                };
                let Responding { body, sent } = &mut **r;
                let n = (out.len() - wire::FRAG_HEAD_LEN).min(body.len() - *sent);
                wire::write_frag_head(out, *sent as u32);
                out[wire::FRAG_HEAD_LEN..][..n].copy_from_slice(&body[*sent..*sent + n]);
                *sent += n;
                if *sent == body.len() {
                    self.forget(id);
                }
                Transmit {
                    len: wire::FRAG_HEAD_LEN + n,
                    imm: wire::imm(Kind::RespFrag, id),
                }
            }
        })
    }
}

#[cfg(test)]
mod call_size {
    /// The table of calls holds a small call's entry in 24 bytes (see [`super::Call`]).
    #[test]
    fn a_call_table_entry_stays_small() {
        assert!(std::mem::size_of::<(u32, super::Call)>() <= 24);
    }
}
