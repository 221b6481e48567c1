//! The server side of UD sessions: duplicate suppression and reply replay.
//!
//! Per session, a window of `window` entries indexed by `call id % window`, each
//! `Unseen`, `Running` or `Done` with the reply's bytes kept for replay. A request
//! for a new id is dispatched; a duplicate of a running call is answered
//! `IN_PROGRESS`; a duplicate of a finished one gets the stored reply again. So each
//! call executes at most once. A request's `ack_below` lets the server forget every
//! entry below it; an id below the window is stale, one beyond it a protocol
//! violation: both are dropped and counted.
//!
//! **Bound.** A session holds at most `window` entries and `window × datagram` bytes
//! of stored replies; sessions are capped by `max_sessions`. So all UD per-peer state
//! is at most `max_sessions × window × (datagram + entry)` bytes. An entry's buffer
//! is sized to the replies it has held (the next power of two, 64 bytes at least),
//! not to the datagram, and reused: a session of small calls keeps about 2 KiB of
//! replies, not `window × datagram` (128 KiB at the defaults), and an entry
//! reallocates only when a reply outgrows every earlier one.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use super::wire::{self as ud_wire, UdHead, UD_HEAD_LEN};
use crate::engine::codec::{self, StatusCuts};
use crate::engine::wire::{Kind, RESPONSE_HEAD_LEN};
use crate::engine::Transmit;
use crate::id_map::IdMap;
use crate::metadata::MetadataMap;
use crate::server::EncodeMessage;
use crate::status::Status;

/// Limits of the UD side of a server.
#[derive(Debug, Clone, Copy)]
pub struct UdServerConfig {
    /// Entries per session (the window granted to clients).
    pub window: u32,
    /// Largest datagram payload in bytes, UD header included.
    pub datagram: usize,
    /// Sessions at most.
    pub max_sessions: u32,
}

/// Counters and the current size of the per-session state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdServerStats {
    /// Sessions open now.
    pub sessions: u64,
    /// Window entries in use now (running or holding a reply), over all sessions.
    pub entries_in_use: u64,
    /// Most entries in use in any one session now.
    pub max_session_entries: u64,
    /// Bytes of stored replies now.
    pub stored_reply_bytes: u64,
    /// Bytes allocated for stored replies now (entry buffers, `datagram` each).
    pub reply_buffer_bytes: u64,
    /// Calls handed to the application (each executes once).
    pub executed: u64,
    /// Duplicate requests that did not execute again.
    pub duplicates_suppressed: u64,
    /// Stored replies sent again.
    pub replays: u64,
    /// `IN_PROGRESS` answers sent for duplicates of running calls.
    pub in_progress: u64,
    /// Requests below the session's window (already acknowledged): dropped.
    pub stale: u64,
    /// Requests beyond the session's window: dropped.
    pub beyond_window: u64,
    /// Datagrams naming no open session: dropped.
    pub unknown_session: u64,
    /// Datagrams whose source QP is not the session's: dropped.
    pub spoofed: u64,
    /// Datagrams that could not be read: dropped.
    pub malformed: u64,
    /// Replies that did not fit a datagram (sent as `RESOURCE_EXHAUSTED`).
    pub replies_too_big: u64,
    /// What fitting statuses into datagrams cut or dropped (see
    /// [`codec`](crate::engine::codec)).
    pub cuts: StatusCuts,
    /// Replies of calls whose entry was already forgotten: dropped.
    pub abandoned_replies: u64,
    /// Handshakes refused because `max_sessions` were open.
    pub sessions_refused: u64,
    /// Answers not sent because every send slot was in flight (the driver's count;
    /// like lost datagrams, retransmission fetches the stored reply).
    pub sends_dropped: u64,
}

/// A new request for the application (ranges index the datagram handled).
#[derive(Debug)]
pub struct UdIncoming {
    /// Session.
    pub session: u32,
    /// Call id.
    pub id: u32,
    /// Range of the path.
    pub path: Range<usize>,
    /// Range of the body.
    pub body: Range<usize>,
    /// Request metadata.
    pub metadata: MetadataMap,
    /// Time left for the call, as the client sent it.
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Unseen,
    Running,
    Done,
}

#[derive(Debug)]
struct Entry {
    id: u32,
    state: State,
    reply: Vec<u8>,
    imm: u32,
}

#[derive(Debug)]
struct Session {
    peer_qpn: u32,
    /// Largest datagram both sides take (the server's, or the client's if smaller).
    datagram: usize,
    /// Every id below is forgotten (the client's `ack_below`).
    base: u32,
    entries: Vec<Entry>,
}

/// What a duplicate request gets, queued for [`UdServer::poll_transmit`].
#[derive(Debug)]
enum DuplicateAnswer {
    /// The call's stored reply, again.
    Replay(u32),
    /// `IN_PROGRESS`: the call is still running.
    InProgress(u32),
}

/// The UD sessions of a server.
#[derive(Debug)]
pub struct UdServer {
    cfg: UdServerConfig,
    sessions: IdMap<u32, Session>,
    next_session: u32,
    answers: VecDeque<(u32, DuplicateAnswer)>,
    stats: UdServerStats,
}

impl UdServer {
    /// No sessions yet.
    ///
    /// # Panics
    /// If the window is 0 or the datagram cannot hold an error reply.
    pub fn new(cfg: UdServerConfig) -> Self {
        assert!(cfg.window > 0 && cfg.datagram >= UD_HEAD_LEN + RESPONSE_HEAD_LEN + 64);
        UdServer {
            cfg,
            sessions: IdMap::default(),
            next_session: 1,
            answers: VecDeque::new(),
            stats: UdServerStats::default(),
        }
    }

    /// The limits.
    pub fn config(&self) -> &UdServerConfig {
        &self.cfg
    }

    /// Counters, with the current state sizes computed now (O(sessions × window)).
    pub fn stats(&self) -> UdServerStats {
        let mut s = self.stats;
        s.sessions = self.sessions.len() as u64;
        for sess in self.sessions.values() {
            let used = sess.entries.iter().filter(|e| e.state != State::Unseen);
            let n = used.clone().count() as u64;
            s.entries_in_use += n;
            s.max_session_entries = s.max_session_entries.max(n);
            s.stored_reply_bytes += used.map(|e| e.reply.len() as u64).sum::<u64>();
            s.reply_buffer_bytes += sess
                .entries
                .iter()
                .map(|e| e.reply.capacity() as u64)
                .sum::<u64>();
        }
        s
    }

    /// Opens a session for the client UD QP `peer_qpn` that receives datagrams of up
    /// to `datagram` bytes (capped at the server's); refused (`RESOURCE_EXHAUSTED`
    /// naming the limit) when `max_sessions` are open.
    pub fn open_session(&mut self, peer_qpn: u32, datagram: usize) -> Result<u32, Status> {
        if self.sessions.len() >= self.cfg.max_sessions as usize {
            self.stats.sessions_refused += 1;
            return Err(Status::resource_exhausted(format!(
                "the server's limit of {} UD sessions is reached",
                self.cfg.max_sessions
            )));
        }
        let mut id = self.next_session;
        while id == 0 || self.sessions.contains_key(&id) {
            id = id.wrapping_add(1);
        }
        self.next_session = id.wrapping_add(1);
        let entries = (0..self.cfg.window)
            .map(|_| Entry {
                id: 0,
                state: State::Unseen,
                reply: Vec::new(),
                imm: 0,
            })
            .collect();
        self.sessions.insert(
            id,
            Session {
                peer_qpn,
                datagram: datagram.clamp(UD_HEAD_LEN + RESPONSE_HEAD_LEN + 64, self.cfg.datagram),
                base: 1,
                entries,
            },
        );
        Ok(id)
    }

    /// Frees a session (its client is gone): later datagrams naming it are dropped.
    pub fn close_session(&mut self, session: u32) {
        self.sessions.remove(&session);
        self.answers.retain(|(s, _)| *s != session);
    }

    /// Handles one datagram (from its UD header on) sent by UD QP `src_qpn`. A new
    /// request comes back for dispatch (answer it with [`UdServer::respond`]); a
    /// duplicate queues its answer for [`UdServer::poll_transmit`]; anything else is
    /// dropped and counted. Nothing a peer sends makes this panic.
    pub fn handle_datagram(
        &mut self,
        _now: Instant,
        src_qpn: u32,
        imm: u32,
        dgram: &[u8],
    ) -> Option<UdIncoming> {
        let window = self.cfg.window;
        let Some((kind, head)) = UdHead::read(imm, dgram) else {
            self.stats.malformed += 1;
            return None;
        };
        let Some(sess) = self.sessions.get_mut(&head.session) else {
            self.stats.unknown_session += 1;
            return None;
        };
        if sess.peer_qpn != src_qpn {
            self.stats.spoofed += 1;
            return None;
        }
        let id = head.call_id;
        if kind != Kind::Req || ud_wire::seq_lt(id, head.ack_below) {
            self.stats.malformed += 1;
            return None;
        }
        if id.wrapping_sub(head.ack_below) >= window {
            self.stats.beyond_window += 1;
            return None;
        }
        if ud_wire::seq_lt(id, sess.base) {
            self.stats.stale += 1;
            return None;
        }
        if ud_wire::seq_lt(sess.base, head.ack_below) {
            let n = head.ack_below.wrapping_sub(sess.base).min(window);
            for k in 0..n {
                let old = sess.base.wrapping_add(k);
                let e = &mut sess.entries[(old % window) as usize];
                if e.id == old {
                    e.state = State::Unseen;
                    e.reply.clear();
                }
            }
            sess.base = head.ack_below;
        }
        let e = &mut sess.entries[(id % window) as usize];
        if e.id == id && e.state != State::Unseen {
            self.stats.duplicates_suppressed += 1;
            let a = if e.state == State::Running {
                DuplicateAnswer::InProgress(id)
            } else {
                DuplicateAnswer::Replay(id)
            };
            self.answers.push_back((head.session, a));
            return None;
        }
        // A new id: the entry (if it held an older id, that one is below the window
        // now and forgotten) becomes this call's.
        e.id = id;
        e.state = State::Running;
        e.reply.clear();
        let parsed = codec::read_request(&dgram[UD_HEAD_LEN..]).and_then(|r| {
            if r.body.len() != r.body_len {
                return Err(Status::internal(
                    "malformed request: body beyond one datagram",
                ));
            }
            Ok(r)
        });
        match parsed {
            Ok(r) => {
                self.stats.executed += 1;
                let off = UD_HEAD_LEN;
                Some(UdIncoming {
                    session: head.session,
                    id,
                    path: r.path.start + off..r.path.end + off,
                    body: r.body.start + off..r.body.end + off,
                    metadata: r.metadata,
                    timeout: r.timeout,
                })
            }
            Err(s) => {
                // Answered like any call (stored, replayed), without running anything.
                self.stats.malformed += 1;
                let mut scratch = vec![0u8; self.cfg.datagram];
                if self
                    .respond(head.session, id, Err(s), &mut scratch)
                    .is_some()
                {
                    self.answers
                        .push_back((head.session, DuplicateAnswer::Replay(id)));
                }
                None
            }
        }
    }

    /// Writes the application's answer to call `id` of `session` into `out` and keeps
    /// a copy for replay. A reply that does not fit one datagram becomes
    /// `RESOURCE_EXHAUSTED` naming the limit (the handler ran; it is not run again).
    /// A status goes with its metadata and details, fitted to the datagram by
    /// [`codec`]'s rule. `None` if the session or the call's entry is gone (the
    /// reply is dropped).
    pub fn respond(
        &mut self,
        session: u32,
        id: u32,
        result: Result<(&MetadataMap, &dyn EncodeMessage), Status>,
        out: &mut [u8],
    ) -> Option<Transmit> {
        let window = self.cfg.window;
        let Some((datagram, e)) = self
            .sessions
            .get_mut(&session)
            .map(|s| (s.datagram, &mut s.entries[(id % window) as usize]))
            .filter(|(_, e)| e.id == id && e.state == State::Running)
        else {
            self.stats.abandoned_replies += 1;
            return None;
        };
        let out = &mut out[..datagram];
        UdHead {
            session,
            call_id: id,
            ack_below: 0,
        }
        .write(out);
        let f = &mut out[UD_HEAD_LEN..];
        let cuts = &mut self.stats.cuts;
        let len = match result {
            Ok((md, msg)) => {
                let body_len = msg.encoded_len();
                let head_len = RESPONSE_HEAD_LEN + md.encoded_len();
                match codec::write_response(md, body_len, f) {
                    Ok(at) if at + body_len <= f.len() => {
                        msg.encode_to(&mut f[at..at + body_len]);
                        at + body_len
                    }
                    _ => {
                        self.stats.replies_too_big += 1;
                        let s = Status::resource_exhausted(format!(
                            "reply of {} bytes exceeds the UD payload limit of {datagram} bytes",
                            UD_HEAD_LEN + head_len + body_len
                        ));
                        codec::write_status(&s, None, f, cuts).len
                    }
                }
            }
            Err(s) => codec::write_status(&s, None, f, cuts).len,
        };
        let len = UD_HEAD_LEN + len;
        if e.reply.capacity() < len {
            e.reply = Vec::with_capacity(len.next_power_of_two().clamp(64, datagram));
        }
        e.reply.clear();
        e.reply.extend_from_slice(&out[..len]);
        e.imm = ud_wire::imm(Kind::Resp, id);
        e.state = State::Done;
        Some(Transmit { len, imm: e.imm })
    }

    /// Whether [`UdServer::poll_transmit`] has an answer to write.
    pub fn wants_transmit(&self) -> bool {
        !self.answers.is_empty()
    }

    /// Writes the next queued answer (a replayed reply or `IN_PROGRESS`) into `out`,
    /// with the session it goes to.
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Option<(u32, Transmit)> {
        while let Some((session, a)) = self.answers.pop_front() {
            let Some(sess) = self.sessions.get(&session) else {
                continue;
            };
            let (DuplicateAnswer::Replay(id) | DuplicateAnswer::InProgress(id)) = a;
            let e = &sess.entries[(id % self.cfg.window) as usize];
            if e.id != id {
                continue;
            }
            match (a, e.state) {
                (DuplicateAnswer::Replay(_), State::Done) => {
                    self.stats.replays += 1;
                    out[..e.reply.len()].copy_from_slice(&e.reply);
                    return Some((
                        session,
                        Transmit {
                            len: e.reply.len(),
                            imm: e.imm,
                        },
                    ));
                }
                (DuplicateAnswer::InProgress(_), State::Running) => {
                    self.stats.in_progress += 1;
                    UdHead {
                        session,
                        call_id: id,
                        ack_below: 0,
                    }
                    .write(out);
                    return Some((
                        session,
                        Transmit {
                            len: UD_HEAD_LEN,
                            imm: ud_wire::imm(Kind::InProgress, id),
                        },
                    ));
                }
                _ => continue,
            }
        }
        None
    }
}
