//! The client side of a UD session: window, retransmission, reply matching.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::wire::{self as ud_wire, UdHead, UD_HEAD_LEN};
use crate::engine::codec::{self, CallHead};
use crate::engine::wire::{self, Kind};
use crate::engine::{Reply, Transmit};
use crate::metadata::DEFAULT_METADATA_LIMIT;
use crate::server::EncodeMessage;
use crate::status::Status;

/// Settings of a client session.
#[derive(Debug, Clone, Copy)]
pub struct UdClientConfig {
    /// Session id the server assigned.
    pub session: u32,
    /// Calls outstanding at most (ids in `[ack_below, ack_below + window)`).
    pub window: u32,
    /// Largest datagram payload in bytes, UD header included (the UD payload limit).
    pub datagram: usize,
    /// Retransmission timeout before any round trip was measured.
    pub rto_initial: Duration,
    /// Bounds of the retransmission timeout (backoff doubles it up to `rto_max`).
    pub rto_min: Duration,
    /// Largest retransmission timeout.
    pub rto_max: Duration,
    /// Retransmissions of a call with no deadline before it ends `UNAVAILABLE`
    /// (restarted whenever the server answers "in progress").
    pub retry_budget: u32,
}

impl UdClientConfig {
    /// Defaults for `session`, `window` and `datagram`: RTO 2 ms before a measured
    /// round trip, then twice the smoothed RTT within 1–100 ms; budget 40.
    pub fn new(session: u32, window: u32, datagram: usize) -> Self {
        UdClientConfig {
            session,
            window,
            datagram,
            rto_initial: Duration::from_millis(2),
            rto_min: Duration::from_millis(1),
            rto_max: Duration::from_millis(100),
            retry_budget: 40,
        }
    }

    /// Largest request body (with `path` and metadata of `meta_len` bytes) that fits.
    pub fn body_room(&self, path: &str, meta_len: usize) -> usize {
        self.datagram
            .saturating_sub(UD_HEAD_LEN + wire::REQUEST_HEAD_LEN + path.len() + meta_len)
    }
}

/// Counters of a client session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdClientStats {
    /// Calls started.
    pub calls: u64,
    /// Requests sent again after a timeout.
    pub retransmissions: u64,
    /// Replies for calls that already had theirs (the server replayed, the fabric
    /// duplicated, or the call was given up): dropped.
    pub duplicate_replies: u64,
    /// Replies naming another session or a call id never sent: dropped.
    pub stray_replies: u64,
    /// "In progress" answers received.
    pub in_progress: u64,
    /// Datagrams that could not be read.
    pub malformed: u64,
    /// Calls that ended `DEADLINE_EXCEEDED` here.
    pub deadlines: u64,
    /// Calls that ended `UNAVAILABLE` after the retry budget.
    pub gave_up: u64,
}

/// A call that ended, with its waiter and its send slot (to release).
#[derive(Debug)]
pub struct UdCompletion<W, S> {
    /// Call id.
    pub id: u32,
    /// What the caller waits on.
    pub waiter: W,
    /// The send slot the request stayed in.
    pub slot: S,
    /// How it ended ([`Reply::InFrame`] ranges index the datagram just handled).
    pub result: Result<Reply, Status>,
}

/// An outstanding call: its request stays in `slot` for retransmissions.
#[derive(Debug)]
struct Call<W, S> {
    id: u32,
    waiter: W,
    slot: S,
    transmit: Transmit,
    deadline: Option<Instant>,
    next_retx: Instant,
    rto: Duration,
    retries: u32,
    sent_at: Instant,
    retransmitted: bool,
}

/// One UD session's client state. `W` is what a caller waits on, `S` the send slot
/// its request stays in until the call ends (retransmissions repost it).
#[derive(Debug)]
pub struct UdClient<W, S> {
    cfg: UdClientConfig,
    calls: Vec<Option<Call<W, S>>>,
    next_id: u32,
    ack_below: u32,
    reserved: u32,
    srtt: Option<Duration>,
    completions: VecDeque<UdCompletion<W, S>>,
    dead: Option<Status>,
    stats: UdClientStats,
}

impl<W, S> UdClient<W, S> {
    /// A session with `cfg`.
    ///
    /// # Panics
    /// If the window is 0 or above 2^20, or the datagram cannot hold a header.
    pub fn new(cfg: UdClientConfig) -> Self {
        assert!(cfg.window > 0 && cfg.window <= 1 << 20);
        assert!(cfg.datagram > UD_HEAD_LEN + wire::REQUEST_HEAD_LEN);
        UdClient {
            cfg,
            calls: (0..cfg.window).map(|_| None).collect(),
            next_id: 1,
            ack_below: 1,
            reserved: 0,
            srtt: None,
            completions: VecDeque::new(),
            dead: None,
            stats: UdClientStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> UdClientStats {
        self.stats
    }

    /// The settings.
    pub fn config(&self) -> &UdClientConfig {
        &self.cfg
    }

    /// Calls open.
    pub fn open_calls(&self) -> usize {
        self.calls.iter().filter(|c| c.is_some()).count()
    }

    /// Why the session is dead, if it is.
    pub fn dead(&self) -> Option<&Status> {
        self.dead.as_ref()
    }

    fn outstanding(&self) -> u32 {
        self.next_id.wrapping_sub(self.ack_below)
    }

    /// Reserves room in the window for a later [`UdClient::start_call`].
    pub fn reserve(&mut self) -> bool {
        if self.dead.is_some() || self.outstanding() + self.reserved >= self.cfg.window {
            return false;
        }
        self.reserved += 1;
        true
    }

    /// Gives back a reservation that will not be used.
    pub fn unreserve(&mut self) {
        assert!(self.reserved > 0, "unreserve without reservation");
        self.reserved -= 1;
    }

    /// The retransmission timeout a call started now gets.
    pub fn rto(&self) -> Duration {
        match self.srtt {
            None => self.cfg.rto_initial,
            Some(s) => (2 * s).clamp(self.cfg.rto_min, self.cfg.rto_max),
        }
    }

    /// Starts a call on a reservation: writes the whole request datagram into `out`
    /// (the slot `slot` names; the message is encoded straight into it) and keeps
    /// `slot` until the call ends. A request that does not fit one datagram fails
    /// `RESOURCE_EXHAUSTED` naming the limit (the driver checks
    /// [`UdClientConfig::body_room`] first when it can fall back to RC); the waiter
    /// and slot come back with the error.
    #[allow(clippy::result_large_err)]
    pub fn start_call(
        &mut self,
        now: Instant,
        waiter: W,
        slot: S,
        head: &CallHead<'_>,
        body: &dyn EncodeMessage,
        out: &mut [u8],
    ) -> Result<(u32, Transmit), (Status, W, S)> {
        assert!(self.reserved > 0, "start_call without a reservation");
        self.reserved -= 1;
        if let Some(s) = &self.dead {
            return Err((s.clone(), waiter, slot));
        }
        let meta_len = head.metadata.encoded_len();
        let body_len = body.encoded_len();
        let room = self.cfg.body_room(head.path, meta_len);
        if meta_len > DEFAULT_METADATA_LIMIT
            || head.path.len() > usize::from(u16::MAX)
            || body_len > room
        {
            let s = Status::resource_exhausted(format!(
                "request of {} bytes exceeds the UD payload limit of {} bytes",
                UD_HEAD_LEN + head.encoded_len() + body_len,
                self.cfg.datagram
            ));
            return Err((s, waiter, slot));
        }
        let out = &mut out[..self.cfg.datagram];
        let at = match codec::write_request(head, body_len, &mut out[UD_HEAD_LEN..]) {
            Ok(n) => UD_HEAD_LEN + n,
            Err(s) => return Err((s, waiter, slot)),
        };
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        UdHead {
            session: self.cfg.session,
            call_id: id,
            ack_below: self.ack_below,
        }
        .write(out);
        body.encode_to(&mut out[at..at + body_len]);
        let t = Transmit {
            len: at + body_len,
            imm: ud_wire::imm(Kind::Req, id),
        };
        let rto = self.rto();
        self.calls[(id % self.cfg.window) as usize] = Some(Call {
            id,
            waiter,
            slot,
            transmit: t,
            deadline: head.timeout.map(|t| now + t),
            next_retx: now + rto,
            rto,
            retries: 0,
            sent_at: now,
            retransmitted: false,
        });
        self.stats.calls += 1;
        Ok((id, t))
    }

    fn take(&mut self, id: u32) -> Option<Call<W, S>> {
        let e = &mut self.calls[(id % self.cfg.window) as usize];
        if e.as_ref().is_some_and(|c| c.id == id) {
            let c = e.take();
            while self.ack_below != self.next_id
                && self.calls[(self.ack_below % self.cfg.window) as usize].is_none()
            {
                self.ack_below = self.ack_below.wrapping_add(1);
            }
            return c;
        }
        None
    }

    fn find(&mut self, id: u32) -> Option<&mut Call<W, S>> {
        self.calls[(id % self.cfg.window) as usize]
            .as_mut()
            .filter(|c| c.id == id)
    }

    /// Handles one received datagram (from its UD header on). A reply ends its call;
    /// its [`Reply::InFrame`] body range indexes `dgram`. Stray, duplicate and
    /// unreadable datagrams are dropped and counted.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        imm: u32,
        dgram: &[u8],
    ) -> Option<UdCompletion<W, S>> {
        let Some((kind, head)) = UdHead::read(imm, dgram) else {
            self.stats.malformed += 1;
            return None;
        };
        if head.session != self.cfg.session {
            self.stats.stray_replies += 1;
            return None;
        }
        let id = head.call_id;
        if self.find(id).is_none() {
            // Already answered (or given up) if it lies below the ids sent.
            if ud_wire::seq_lt(id, self.next_id) {
                self.stats.duplicate_replies += 1;
            } else {
                self.stats.stray_replies += 1;
            }
            return None;
        }
        match kind {
            Kind::InProgress => {
                self.stats.in_progress += 1;
                let c = self.find(id).expect("found");
                c.retries = 0;
                c.next_retx = now + c.rto;
                None
            }
            Kind::Resp => {
                let result = match read_response(dgram) {
                    Ok(result) => result,
                    Err(s) => {
                        // The call still ends: its caller gets INTERNAL, not a hang.
                        self.stats.malformed += 1;
                        Err(s)
                    }
                };
                let c = self.take(id).expect("found");
                if !c.retransmitted {
                    let sample = now.saturating_duration_since(c.sent_at);
                    self.srtt = Some(match self.srtt {
                        None => sample,
                        Some(s) => (s * 7 + sample) / 8,
                    });
                }
                Some(UdCompletion {
                    id,
                    waiter: c.waiter,
                    slot: c.slot,
                    result,
                })
            }
            _ => {
                self.stats.malformed += 1;
                None
            }
        }
    }

    /// Lends the send slot of open call `id` (to post a just-started call from it).
    pub fn with_slot(&self, id: u32, f: impl FnOnce(&S)) {
        if let Some(c) = self.calls[(id % self.cfg.window) as usize]
            .as_ref()
            .filter(|c| c.id == id)
        {
            f(&c.slot);
        }
    }

    /// The caller gave up on `id`: forget it (no CANCEL is sent: the server's stored
    /// reply, if any, is dropped once `ack_below` passes the id). The slot comes back.
    pub fn cancel(&mut self, id: u32) -> Option<S> {
        self.take(id).map(|c| c.slot)
    }

    /// When [`UdClient::handle_timeout`] has work next (a retransmission or a deadline).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.calls
            .iter()
            .flatten()
            .map(|c| c.deadline.map_or(c.next_retx, |d| d.min(c.next_retx)))
            .min()
    }

    /// Ends calls whose deadline passed (`DEADLINE_EXCEEDED`) or whose retry budget is
    /// spent (`UNAVAILABLE`), into [`UdClient::poll_completion`]; calls `retransmit`
    /// with the slot and datagram of each call due for a retransmission, with
    /// exponential backoff (a deadline cuts the wait short, never the call early).
    pub fn handle_timeout(&mut self, now: Instant, mut retransmit: impl FnMut(&S, Transmit)) {
        let budget = self.cfg.retry_budget;
        let rto_max = self.cfg.rto_max;
        let mut ended = Vec::new();
        for c in self.calls.iter_mut().flatten() {
            if c.deadline.is_some_and(|d| d <= now) {
                ended.push((
                    c.id,
                    Status::deadline_exceeded("deadline exceeded (UD call)"),
                ));
                continue;
            }
            if c.next_retx > now {
                continue;
            }
            if c.deadline.is_none() && c.retries >= budget {
                ended.push((
                    c.id,
                    Status::unavailable(format!("no reply over UD after {budget} retransmissions")),
                ));
                continue;
            }
            c.retries += 1;
            c.retransmitted = true;
            c.rto = (c.rto * 2).min(rto_max);
            c.next_retx = now + c.rto;
            self.stats.retransmissions += 1;
            retransmit(&c.slot, c.transmit);
        }
        for (id, status) in ended {
            if status.code() == crate::code::Code::DeadlineExceeded {
                self.stats.deadlines += 1;
            } else {
                self.stats.gave_up += 1;
            }
            let c = self.take(id).expect("listed");
            self.completions.push_back(UdCompletion {
                id,
                waiter: c.waiter,
                slot: c.slot,
                result: Err(status),
            });
        }
    }

    /// The server is gone: every open call ends with `status`, later calls fail.
    pub fn handle_peer_lost(&mut self, status: Status) {
        for c in self.calls.iter_mut().filter_map(Option::take) {
            self.completions.push_back(UdCompletion {
                id: c.id,
                waiter: c.waiter,
                slot: c.slot,
                result: Err(status.clone()),
            });
        }
        self.ack_below = self.next_id;
        self.dead = Some(status);
    }

    /// Calls ended by timeouts and a lost peer.
    pub fn poll_completion(&mut self) -> Option<UdCompletion<W, S>> {
        self.completions.pop_front()
    }
}

/// Reads a whole reply datagram (UD has no fragments) into the call's result; `Err`
/// if it is malformed. The body range indexes `dgram`.
fn read_response(dgram: &[u8]) -> Result<Result<Reply, Status>, Status> {
    let start = codec::read_response(&dgram[UD_HEAD_LEN..])?;
    if start.body.len() != start.body_len {
        return Err(Status::internal(
            "malformed response: body beyond one datagram",
        ));
    }
    let body = start.body.start + UD_HEAD_LEN..start.body.end + UD_HEAD_LEN;
    Ok(start
        .outcome
        .finish(body, |b| Bytes::copy_from_slice(&dgram[b]))
        .map(|(metadata, body)| Reply::InFrame { metadata, body }))
}
