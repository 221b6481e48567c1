//! UD engines over a simulated fabric: discrete time (one tick = 100 µs), a seeded
//! generator, loss, duplication, reordering (random latency) and slow handlers.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::wire::UD_HEAD_LEN;
use super::*;
use crate::code::Code;
use crate::engine::wire::Kind;
use crate::engine::{CallHead, Reply};
use crate::metadata::MetadataMap;

/// Raw bytes as a message.
struct Raw(Vec<u8>);

impl crate::server::EncodeMessage for Raw {
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn encode_to(&self, out: &mut [u8]) {
        out[..self.0.len()].copy_from_slice(&self.0);
    }
}

/// Deterministic xorshift generator.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() % 1_000_000) as f64 / 1_000_000.0 < p
    }
}

const TICK: Duration = Duration::from_micros(100);
const DGRAM: usize = 1024;

#[derive(Clone, Copy)]
struct Knobs {
    loss: f64,
    dup: f64,
    /// Extra latency drawn uniformly in `0..=jitter` ticks (reorders).
    jitter: u64,
    /// Handler time drawn in `0..=app` ticks.
    app: u64,
}

struct Dgram {
    at: u64,
    imm: u32,
    bytes: Vec<u8>,
}

struct Net {
    rng: Rng,
    k: Knobs,
    to_server: Vec<Dgram>,
    to_client: Vec<Dgram>,
}

impl Net {
    fn send(&mut self, now: u64, to_server: bool, imm: u32, bytes: &[u8]) {
        if self.rng.chance(self.k.loss) {
            return;
        }
        let copies = if self.rng.chance(self.k.dup) { 2 } else { 1 };
        for _ in 0..copies {
            let at = now + 1 + self.rng.next() % (self.k.jitter + 1);
            let d = Dgram {
                at,
                imm,
                bytes: bytes.to_vec(),
            };
            if to_server {
                self.to_server.push(d);
            } else {
                self.to_client.push(d);
            }
        }
    }
}

fn due(q: &mut Vec<Dgram>, now: u64) -> Vec<Dgram> {
    let (d, rest): (Vec<_>, Vec<_>) = q.drain(..).partition(|d| d.at <= now);
    *q = rest;
    d
}

struct Outcome {
    ok: u64,
    errors: Vec<Status>,
    executed: HashMap<u64, u32>,
    client: UdClientStats,
    server: UdServerStats,
}

use crate::status::Status;

/// Runs `n` calls (body = the call number) with `window` outstanding; the handler
/// echoes the body after a random delay and counts executions per call number.
fn run(seed: u64, k: Knobs, n: u64, window: u32, timeout: Option<Duration>) -> Outcome {
    let t0 = Instant::now();
    let at = |tick: u64| t0 + TICK * tick as u32;
    let mut net = Net {
        rng: Rng::new(seed),
        k,
        to_server: Vec::new(),
        to_client: Vec::new(),
    };
    let mut server = UdServer::new(UdServerConfig {
        window,
        datagram: DGRAM,
        max_sessions: 4,
    });
    let session = server.open_session(77, DGRAM).unwrap();
    let mut client: UdClient<u64, Slot> =
        UdClient::new(UdClientConfig::new(session, window, DGRAM));
    let mut executed: HashMap<u64, u32> = HashMap::new();
    // (finish tick, session, id, body)
    let mut running: Vec<(u64, u32, u32, Vec<u8>)> = Vec::new();
    let (mut started, mut ok, mut errors) = (0u64, 0u64, Vec::new());
    let mut out = vec![0u8; DGRAM];
    let md = MetadataMap::new();
    let mut tick = 0u64;
    while ok + (errors.len() as u64) < n {
        tick += 1;
        assert!(tick < 50_000_000, "simulation does not converge");
        let now = at(tick);
        while started < n && client.reserve() {
            let body = started.to_be_bytes().to_vec();
            // The "send slot" keeps the datagram for retransmissions.
            let slot = Slot::default();
            let (_, t) = client
                .start_call(
                    now,
                    started,
                    slot.clone(),
                    &CallHead::new("/s/m", &md, timeout),
                    &Raw(body),
                    &mut out,
                )
                .map_err(|e| e.0)
                .unwrap();
            *slot.borrow_mut() = out[..t.len].to_vec();
            net.send(tick, true, t.imm, &out[..t.len]);
            started += 1;
        }
        for d in due(&mut net.to_server, tick) {
            if let Some(inc) = server.handle_datagram(now, 77, d.imm, &d.bytes) {
                let num = u64::from_be_bytes(d.bytes[inc.body.clone()].try_into().unwrap());
                *executed.entry(num).or_default() += 1;
                let delay = net.rng.next() % (k.app + 1);
                running.push((
                    tick + delay,
                    inc.session,
                    inc.id,
                    d.bytes[inc.body].to_vec(),
                ));
            }
            while let Some((_, t)) = server.poll_transmit(&mut out) {
                let b = out[..t.len].to_vec();
                net.send(tick, false, t.imm, &b);
            }
        }
        let (done, still): (Vec<_>, Vec<_>) = running.drain(..).partition(|r| r.0 <= tick);
        running = still;
        for (_, s, id, body) in done {
            if let Some(t) = server.respond(s, id, Ok((&md, &Raw(body))), &mut out) {
                let b = out[..t.len].to_vec();
                net.send(tick, false, t.imm, &b);
            }
        }
        for d in due(&mut net.to_client, tick) {
            if let Some(c) = client.handle_datagram(now, d.imm, &d.bytes) {
                match c.result {
                    Ok(Reply::InFrame { body, .. }) => {
                        assert_eq!(d.bytes[body].to_vec(), c.waiter.to_be_bytes().to_vec());
                        ok += 1;
                    }
                    Ok(Reply::Owned { .. } | Reply::Shared { .. }) => {
                        panic!("UD replies are in the datagram")
                    }
                    Err(s) => errors.push(s),
                }
            }
        }
        if client.poll_timeout().is_some_and(|t| t <= now) {
            let mut resend = Vec::new();
            client.handle_timeout(now, |slot, t| resend.push((t.imm, slot.borrow().clone())));
            for (imm, b) in resend {
                net.send(tick, true, imm, &b);
            }
            while let Some(c) = client.poll_completion() {
                errors.push(c.result.unwrap_err());
            }
        }
    }
    Outcome {
        ok,
        errors,
        executed,
        client: client.stats(),
        server: server.stats(),
    }
}

/// A send slot: the datagram's bytes, written once after `start_call`.
type Slot = Rc<RefCell<Vec<u8>>>;

#[test]
fn every_call_executes_exactly_once_under_loss_duplication_and_reordering() {
    let k = Knobs {
        loss: 0.2,
        dup: 0.1,
        jitter: 30,
        app: 40,
    };
    for seed in 1..=3 {
        let o = run(seed, k, 3_000, 16, None);
        assert!(o.errors.is_empty(), "seed {seed}: {:?}", &o.errors[..1]);
        assert_eq!(o.ok, 3_000);
        assert_eq!(o.executed.len(), 3_000);
        assert!(
            o.executed.values().all(|&n| n == 1),
            "seed {seed}: re-executed"
        );
        assert_eq!(o.server.executed, 3_000);
        assert!(o.client.retransmissions > 0 && o.server.duplicates_suppressed > 0);
        assert!(
            o.server.replays > 0 && o.server.in_progress > 0,
            "{:?}",
            o.server
        );
        assert!(o.client.duplicate_replies > 0, "{:?}", o.client);
        // Bounded state: never more than the window in one session.
        assert!(o.server.max_session_entries <= 16);
        assert!(o.server.reply_buffer_bytes <= 16 * DGRAM as u64);
    }
}

#[test]
fn total_loss_ends_calls_at_the_deadline_or_after_the_retry_budget() {
    let k = Knobs {
        loss: 1.0,
        dup: 0.0,
        jitter: 0,
        app: 0,
    };
    let o = run(5, k, 4, 4, Some(Duration::from_millis(50)));
    assert_eq!(o.errors.len(), 4);
    assert!(o.errors.iter().all(|s| s.code() == Code::DeadlineExceeded));
    assert_eq!(o.client.deadlines, 4);
    assert_eq!(o.server.executed, 0);

    let o = run(5, k, 2, 4, None);
    assert!(
        o.errors.iter().all(|s| s.code() == Code::Unavailable),
        "{:?}",
        o.errors
    );
    assert!(o.errors[0].message().contains("40 retransmissions"));
    assert_eq!(o.client.retransmissions, 2 * 40);
}

#[test]
fn stray_and_duplicate_replies_are_dropped_and_counted() {
    let mut s = UdServer::new(UdServerConfig {
        window: 4,
        datagram: DGRAM,
        max_sessions: 1,
    });
    let sess = s.open_session(5, DGRAM).unwrap();
    let mut c: UdClient<(), ()> = UdClient::new(UdClientConfig::new(sess, 4, DGRAM));
    let now = Instant::now();
    let md = MetadataMap::new();
    let head = CallHead::new("/s/m", &md, None);
    let mut out = vec![0u8; DGRAM];
    assert!(c.reserve());
    let (id, t) = c
        .start_call(now, (), (), &head, &Raw(vec![1]), &mut out)
        .map_err(|e| e.0)
        .unwrap();
    let req = out[..t.len].to_vec();
    let inc = s.handle_datagram(now, 5, t.imm, &req).unwrap();
    let t = s
        .respond(sess, inc.id, Ok((&md, &Raw(vec![2]))), &mut out)
        .unwrap();
    let reply = out[..t.len].to_vec();
    // Another session's reply, then the real one twice.
    let mut other = reply.clone();
    other[0] ^= 1;
    assert!(c.handle_datagram(now, t.imm, &other).is_none());
    assert!(c
        .handle_datagram(now, t.imm, &reply)
        .unwrap()
        .result
        .is_ok());
    assert!(c.handle_datagram(now, t.imm, &reply).is_none());
    // A reply for an id never sent, and garbage.
    let mut future = reply.clone();
    future[4..8].copy_from_slice(&(id + 9).to_be_bytes());
    let fimm = super::wire::imm(Kind::Resp, id + 9);
    assert!(c.handle_datagram(now, fimm, &future).is_none());
    assert!(c.handle_datagram(now, 0, &[1, 2]).is_none());
    let st = c.stats();
    assert_eq!(
        (st.stray_replies, st.duplicate_replies, st.malformed),
        (2, 1, 1)
    );
    // A reply that does not read still ends its call (INTERNAL), counted.
    assert!(c.reserve());
    let (id2, _) = c
        .start_call(now, (), (), &head, &Raw(vec![1]), &mut out)
        .map_err(|e| e.0)
        .unwrap();
    let mut junk = reply[..UD_HEAD_LEN].to_vec();
    junk[4..8].copy_from_slice(&id2.to_be_bytes());
    junk.extend_from_slice(&[0xff; 5]);
    let e = c
        .handle_datagram(now, super::wire::imm(Kind::Resp, id2), &junk)
        .unwrap()
        .result
        .unwrap_err();
    assert_eq!(e.code(), Code::Internal, "{e:?}");
    assert_eq!(c.stats().malformed, 2);
    assert_eq!(c.open_calls(), 0);

    // The server: a duplicate replays, a wrong source or session is dropped.
    // A RESP-kind datagram sent to the server is malformed.
    assert!(s.handle_datagram(now, 5, t.imm, &req).is_none());
    let req_imm = super::wire::imm(Kind::Req, id);
    assert!(s.handle_datagram(now, 5, req_imm, &req).is_none());
    assert!(s.handle_datagram(now, 6, req_imm, &req).is_none());
    let mut bad = req.clone();
    bad[0] ^= 0x40;
    assert!(s.handle_datagram(now, 5, req_imm, &bad).is_none());
    assert!(s.handle_datagram(now, 5, 3, &[0; 3]).is_none());
    let (_, rt) = s.poll_transmit(&mut out).unwrap();
    assert_eq!(&out[..rt.len], &reply[..], "replayed byte for byte");
    let ss = s.stats();
    assert_eq!((ss.replays, ss.spoofed, ss.unknown_session), (1, 1, 1));
    assert_eq!((ss.executed, ss.duplicates_suppressed), (1, 1));
}

#[test]
fn window_bounds_the_client_and_the_server_forgets_acknowledged_calls() {
    let mut s = UdServer::new(UdServerConfig {
        window: 2,
        datagram: DGRAM,
        max_sessions: 1,
    });
    let sess = s.open_session(5, DGRAM).unwrap();
    assert_eq!(
        s.open_session(6, DGRAM).unwrap_err().code(),
        Code::ResourceExhausted
    );
    let mut c: UdClient<(), ()> = UdClient::new(UdClientConfig::new(sess, 2, DGRAM));
    let now = Instant::now();
    let md = MetadataMap::new();
    let head = CallHead::new("/s/m", &md, None);
    let mut out = vec![0u8; DGRAM];
    let mut reqs = Vec::new();
    for _ in 0..2 {
        assert!(c.reserve());
        let (_, t) = c
            .start_call(now, (), (), &head, &Raw(vec![1]), &mut out)
            .map_err(|e| e.0)
            .unwrap();
        reqs.push((t.imm, out[..t.len].to_vec()));
    }
    assert!(!c.reserve(), "the window is full");
    for (imm, r) in &reqs {
        let inc = s.handle_datagram(now, 5, *imm, r).unwrap();
        let t = s
            .respond(sess, inc.id, Ok((&md, &Raw(vec![0; 100]))), &mut out)
            .unwrap();
        let reply = out[..t.len].to_vec();
        assert!(c.handle_datagram(now, t.imm, &reply).is_some());
    }
    assert_eq!(s.stats().entries_in_use, 2);
    // The next request acknowledges both: their stored replies go.
    assert!(c.reserve());
    let (_, t) = c
        .start_call(now, (), (), &head, &Raw(vec![1]), &mut out)
        .map_err(|e| e.0)
        .unwrap();
    let r3 = out[..t.len].to_vec();
    assert!(s.handle_datagram(now, 5, t.imm, &r3).is_some());
    let st = s.stats();
    assert_eq!((st.entries_in_use, st.stored_reply_bytes), (1, 0));
    // The first request again is stale now; an id beyond the window is refused.
    assert!(s.handle_datagram(now, 5, reqs[0].0, &reqs[0].1).is_none());
    assert_eq!(s.stats().stale, 1);
    let mut far = r3.clone();
    far[4..8].copy_from_slice(&9u32.to_be_bytes());
    assert!(s
        .handle_datagram(now, 5, super::wire::imm(Kind::Req, 9), &far)
        .is_none());
    assert_eq!(s.stats().beyond_window, 1);
    // A request too big for a datagram never leaves the client.
    assert!(c.reserve());
    let e = c
        .start_call(now, (), (), &head, &Raw(vec![0; DGRAM]), &mut out)
        .unwrap_err();
    assert_eq!(e.0.code(), Code::ResourceExhausted);
    assert!(e
        .0
        .message()
        .contains(&format!("UD payload limit of {DGRAM}")));
    // A reply too big becomes RESOURCE_EXHAUSTED, stored like any reply.
    let inc = s.handle_datagram(now, 5, t.imm, &r3);
    assert!(inc.is_none(), "a duplicate of a running call");
    let t = s
        .respond(sess, 3, Ok((&md, &Raw(vec![7; DGRAM]))), &mut out)
        .unwrap();
    let reply = out[..t.len].to_vec();
    let e = c
        .handle_datagram(now, t.imm, &reply)
        .unwrap()
        .result
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(
        e.message()
            .contains(&format!("UD payload limit of {DGRAM}")),
        "{e:?}"
    );
    assert_eq!(s.stats().replies_too_big, 1);
    s.close_session(sess);
    assert_eq!(s.stats().sessions, 0);
    let late = s.handle_datagram(now, 5, reqs[1].0, &reqs[1].1);
    assert!(late.is_none());
    assert_eq!(s.stats().unknown_session, 1);
}

#[test]
fn a_duplicate_of_a_running_call_is_answered_in_progress_and_a_credit_return_is_not_ud() {
    let mut s = UdServer::new(UdServerConfig {
        window: 4,
        datagram: DGRAM,
        max_sessions: 1,
    });
    let sess = s.open_session(5, DGRAM).unwrap();
    let mut c: UdClient<(), ()> = UdClient::new(UdClientConfig::new(sess, 4, DGRAM));
    let now = Instant::now();
    let md = MetadataMap::new();
    let mut out = vec![0u8; DGRAM];
    assert!(c.reserve());
    let (id, t) = c
        .start_call(
            now,
            (),
            (),
            &CallHead::new("/s/m", &md, None),
            &Raw(vec![1]),
            &mut out,
        )
        .map_err(|e| e.0)
        .unwrap();
    let req = out[..t.len].to_vec();
    assert!(s.handle_datagram(now, 5, t.imm, &req).is_some());
    // A retransmission arrives while the handler runs: it does not run again.
    assert!(s.handle_datagram(now, 5, t.imm, &req).is_none());
    let (_, a) = s.poll_transmit(&mut out).unwrap();
    assert_eq!(
        crate::engine::wire::parse_imm(a.imm),
        Some((Kind::InProgress, id))
    );
    let answer = out[..a.len].to_vec();
    // The client keeps waiting: the call stays open, its next retransmission moves.
    let later = now + Duration::from_millis(1);
    assert!(c.handle_datagram(later, a.imm, &answer).is_none());
    assert_eq!(c.stats().in_progress, 1);
    assert_eq!(c.open_calls(), 1);
    assert_eq!(c.poll_timeout(), Some(later + c.rto()));
    // RC's credit return (kind 7, once UD's "in progress") means nothing on UD.
    let cr = super::wire::imm(Kind::Cr, id);
    assert!(c.handle_datagram(later, cr, &answer).is_none());
    let st = c.stats();
    assert_eq!((st.in_progress, st.malformed), (1, 1));
    assert_eq!(c.open_calls(), 1);
}

/// One UD call answered with `status`: the client's view of it, and the server.
fn ud_status_round_trip(status: Status) -> (Status, UdServer) {
    let mut s = UdServer::new(UdServerConfig {
        window: 4,
        datagram: DGRAM,
        max_sessions: 1,
    });
    let sess = s.open_session(5, DGRAM).unwrap();
    let mut c: UdClient<(), ()> = UdClient::new(UdClientConfig::new(sess, 4, DGRAM));
    let now = Instant::now();
    let md = MetadataMap::new();
    let mut out = vec![0u8; DGRAM];
    assert!(c.reserve());
    let (_, t) = c
        .start_call(
            now,
            (),
            (),
            &CallHead::new("/s/m", &md, None),
            &Raw(vec![1]),
            &mut out,
        )
        .map_err(|e| e.0)
        .unwrap();
    let req = out[..t.len].to_vec();
    let inc = s.handle_datagram(now, 5, t.imm, &req).unwrap();
    let t = s.respond(sess, inc.id, Err(status), &mut out).unwrap();
    assert!(t.len <= DGRAM);
    let reply = out[..t.len].to_vec();
    // A duplicate request gets the same reply, replayed from the server's copy.
    assert!(s.handle_datagram(now, 5, req_imm(&req), &req).is_none());
    let (_, rt) = s.poll_transmit(&mut out).unwrap();
    assert_eq!(&out[..rt.len], &reply[..]);
    let e = c
        .handle_datagram(now, t.imm, &reply)
        .unwrap()
        .result
        .unwrap_err();
    (e, s)
}

fn req_imm(req: &[u8]) -> u32 {
    let id = u32::from_be_bytes(req[4..8].try_into().unwrap());
    super::wire::imm(Kind::Req, id)
}

fn rich_status(details: usize) -> Status {
    let mut s = Status::with_details(
        Code::FailedPrecondition,
        "quota spent",
        bytes::Bytes::from(vec![3u8; details]),
    );
    s.metadata_mut().insert("retry-after", "5".parse().unwrap());
    s.metadata_mut().insert_bin(
        "trace-bin",
        crate::metadata::MetadataValue::from_bytes(&[0, 1, 255]),
    );
    s
}

#[test]
fn a_ud_status_keeps_its_metadata_and_details() {
    let sent = rich_status(200);
    let (e, s) = ud_status_round_trip(sent.clone());
    assert_eq!((e.code(), e.message()), (sent.code(), sent.message()));
    assert_eq!(
        e.metadata(),
        sent.metadata(),
        "metadata no longer lost on UD"
    );
    assert_eq!(e.details(), sent.details());
    assert_eq!(s.stats().cuts, crate::engine::codec::StatusCuts::default());
}

#[test]
fn a_ud_status_too_big_for_its_datagram_loses_its_details_whole_never_its_code() {
    let sent = rich_status(DGRAM);
    let (e, s) = ud_status_round_trip(sent.clone());
    assert_eq!((e.code(), e.message()), (sent.code(), sent.message()));
    assert_eq!(e.metadata(), sent.metadata());
    assert!(e.details().is_empty());
    assert_eq!(s.stats().cuts.details_dropped, 1);

    // Metadata larger than the datagram: dropped whole, counted; the message stays.
    let mut sent = Status::new(Code::Aborted, "conflict");
    sent.metadata_mut()
        .insert("big", "x".repeat(DGRAM).parse().unwrap());
    let (e, s) = ud_status_round_trip(sent);
    assert_eq!((e.code(), e.message()), (Code::Aborted, "conflict"));
    assert!(e.metadata().is_empty());
    assert_eq!(s.stats().cuts.metadata_dropped, 1);
}

#[test]
fn a_session_of_small_calls_keeps_small_reply_buffers_and_grows_one_for_a_large_reply() {
    const WINDOW: u32 = 32;
    let mut s = UdServer::new(UdServerConfig {
        window: WINDOW,
        datagram: DGRAM,
        max_sessions: 1,
    });
    let sess = s.open_session(5, DGRAM).unwrap();
    let mut c: UdClient<(), ()> = UdClient::new(UdClientConfig::new(sess, WINDOW, DGRAM));
    let now = Instant::now();
    let md = MetadataMap::new();
    let head = CallHead::new("/s/m", &md, None);
    let mut out = vec![0u8; DGRAM];
    let mut round_trip = |s: &mut UdServer, reply_len: usize| {
        assert!(c.reserve());
        let (_, t) = c
            .start_call(now, (), (), &head, &Raw(vec![1]), &mut out)
            .map_err(|e| e.0)
            .unwrap();
        let req = out[..t.len].to_vec();
        let inc = s.handle_datagram(now, 5, t.imm, &req).unwrap();
        let t = s
            .respond(sess, inc.id, Ok((&md, &Raw(vec![3; reply_len]))), &mut out)
            .unwrap();
        let reply = out[..t.len].to_vec();
        assert!(c
            .handle_datagram(now, t.imm, &reply)
            .unwrap()
            .result
            .is_ok());
    };
    // Twice around the window with 32-byte replies: every entry has held one.
    for _ in 0..2 * WINDOW {
        round_trip(&mut s, 32);
    }
    let small = s.stats().reply_buffer_bytes;
    assert!(
        small <= u64::from(WINDOW) * 128,
        "{small} bytes of reply buffers for 32-byte replies (a datagram each would be {})",
        u64::from(WINDOW) * DGRAM as u64
    );
    // A large reply grows its entry's buffer, and only that one.
    round_trip(&mut s, DGRAM / 2);
    let grown = s.stats().reply_buffer_bytes;
    assert!(
        grown > small && grown <= small + DGRAM as u64,
        "{small} -> {grown}"
    );
}
