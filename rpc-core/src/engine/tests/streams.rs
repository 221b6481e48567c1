//! Deterministic tests of streaming calls over a simulated fabric: both engines,
//! one tick of latency each way, and the receive-queue invariants checked on every
//! delivery (a frame that finds no receive posted is RNR, and fails the test).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::code::Code;
use crate::engine::codec;
use crate::engine::wire::{self, Kind, SERVER_CREDITS, STREAM_WINDOW};
use crate::engine::{
    CallHead, ClientConfig, ClientConn, ServerConfig, ServerConn, ServerStreamEvent, StreamEvent,
};
use crate::metadata::MetadataMap;
use crate::status::Status;

const FRAME: usize = 512;
const CREDITS: u32 = 8;

/// What one side saw of one call.
#[derive(Debug, Default)]
struct Seen {
    headers: bool,
    /// Messages delivered and not yet taken by the reader.
    unread: VecDeque<Vec<u8>>,
    /// Messages the reader took.
    read: Vec<Vec<u8>>,
    /// Client: how the call ended. Server: a reset or refusal.
    end: Option<Result<(), Status>>,
    half_closed: bool,
    opened: bool,
}

struct StreamSim {
    c: ClientConn<u64>,
    s: ServerConn,
    to_s: VecDeque<(u32, Vec<u8>)>,
    to_c: VecDeque<(u32, Vec<u8>)>,
    /// Receives posted at the server for this connection, and at the client.
    s_recvs: u32,
    c_recvs: u32,
    epoch: Instant,
    tick: u64,
    client: HashMap<u32, Seen>,
    server: HashMap<u32, Seen>,
    /// Readers that take every message as it comes.
    c_auto: bool,
    s_auto: bool,
    /// The client enforces its deadlines (off: only the server's end a call).
    c_timers: bool,
    /// The client is gone without a word: frames to it vanish (kept here), and it
    /// sends nothing.
    c_gone: Option<Vec<(u32, Vec<u8>)>>,
}

impl StreamSim {
    fn new(client_max: (usize, usize), server_max: (usize, usize)) -> StreamSim {
        StreamSim {
            c: ClientConn::new(ClientConfig {
                credits: CREDITS,
                frame_size: FRAME,
                max_send_message: client_max.0,
                max_recv_message: client_max.1,
            }),
            s: ServerConn::new(ServerConfig {
                frame_size: FRAME,
                max_recv_message: server_max.1,
                max_send_message: server_max.0,
                buffer_cap: 1 << 20,
            }),
            to_s: VecDeque::new(),
            to_c: VecDeque::new(),
            s_recvs: CREDITS,
            // The receives for server frames come with the first stream.
            c_recvs: CREDITS,
            epoch: Instant::now(),
            tick: 0,
            client: HashMap::new(),
            server: HashMap::new(),
            c_auto: true,
            s_auto: true,
            c_timers: true,
            c_gone: None,
        }
    }

    fn plain() -> StreamSim {
        StreamSim::new((1 << 20, 1 << 20), (1 << 20, 1 << 20))
    }

    /// Plain, with each side's stream window set (what it lets its peer send ahead).
    fn with_windows(client: u32, server: u32) -> StreamSim {
        let mut sim = StreamSim::plain();
        sim.c = ClientConn::new(ClientConfig {
            credits: CREDITS,
            frame_size: FRAME,
            max_send_message: 1 << 20,
            max_recv_message: 1 << 20,
        })
        .with_stream_window(client);
        sim.s.set_stream_window(server);
        sim
    }

    fn now(&self) -> Instant {
        self.epoch + Duration::from_millis(self.tick)
    }

    fn open(&mut self, timeout: Option<Duration>) -> u32 {
        assert!(self.c.reserve(), "a token for the call");
        let mut out = vec![0u8; FRAME];
        let md = MetadataMap::new();
        let now = self.now();
        let (id, t) = self
            .c
            .start_stream(now, &CallHead::new("/p.S/M", &md, timeout), &mut out)
            .unwrap();
        out.truncate(t.len);
        self.to_s.push_back((t.imm, out));
        self.client.entry(id).or_default();
        if self.c.streams().receives_wanted() {
            // The driver posts them, then the engine grants them to the server.
            self.c_recvs += SERVER_CREDITS;
            self.c.streams().receives_posted();
        }
        id
    }

    /// The client sends `m` on `id` if the call has credit and a token is free.
    fn client_send(&mut self, id: u32, m: &[u8]) -> bool {
        if !self.c.streams().can_send(id) || !self.c.reserve() {
            return false;
        }
        let mut out = vec![0u8; FRAME];
        let t = self
            .c
            .send_stream_message(id, m.len(), |o| o.copy_from_slice(m), &mut out)
            .unwrap();
        out.truncate(t.len);
        self.to_s.push_back((t.imm, out));
        true
    }

    fn server_send(&mut self, id: u32, m: &[u8]) -> bool {
        if !self.s.streams().can_send(id) {
            return false;
        }
        let mut out = vec![0u8; FRAME];
        match self
            .s
            .send_stream_message(id, m.len(), |o| o.copy_from_slice(m), &mut out)
        {
            Ok(t) => {
                out.truncate(t.len);
                self.to_c.push_back((t.imm, out));
                true
            }
            Err(_) => false,
        }
    }

    /// The server packs as many of `msgs` as credit and one frame allow into a
    /// batch `MSG` (as a writer coalescing ready messages does): how many went.
    fn server_send_batch(&mut self, id: u32, msgs: &[Vec<u8>]) -> usize {
        if !self.s.streams().can_send(id) {
            return 0;
        }
        let mut credit = self.s.streams().send_credit(id);
        let mut staged = vec![0u8; FRAME];
        let mut b = wire::BatchWriter::new(&mut staged);
        for m in msgs {
            if credit <= 0 || !b.push(m.len(), |o| o.copy_from_slice(m)) {
                break;
            }
            credit -= wire::charge(m.len()) as i64;
        }
        let n = b.count() as usize;
        let len = b.finish();
        let mut out = vec![0u8; FRAME];
        let t = self
            .s
            .send_stream_batch(id, &staged[..len], &mut out)
            .expect("a batch within credit");
        out.truncate(t.len);
        self.to_c.push_back((t.imm, out));
        n
    }

    /// The server sends `len`-byte messages on `id` in batches, stepping as
    /// connection credits run out, until the call's credit is spent: how many.
    fn fill_window(&mut self, id: u32, len: usize) -> usize {
        let mut sent = 0;
        while self.s.streams().send_credit(id) > 0 {
            let batch: Vec<Vec<u8>> = (sent..sent + 200).map(|i| msg(id, i, len)).collect();
            match self.server_send_batch(id, &batch) {
                0 => self.step(),
                n => sent += n,
            }
        }
        sent
    }

    fn server_answer(&mut self, id: u32, r: Result<(), Status>) {
        let mut out = vec![0u8; FRAME];
        let md = MetadataMap::new();
        if let Some(t) = self.s.respond_stream(id, r.map(|()| &md), &mut out) {
            out.truncate(t.len);
            self.to_c.push_back((t.imm, out));
        }
    }

    fn client_take(&mut self, id: u32) {
        let seen = self.client.get_mut(&id).unwrap();
        if let Some(m) = seen.unread.pop_front() {
            seen.read.push(m);
            self.c
                .streams()
                .taken(id, wire::charge(seen.read.last().unwrap().len()));
        }
    }

    fn server_take(&mut self, id: u32) {
        let seen = self.server.get_mut(&id).unwrap();
        if let Some(m) = seen.unread.pop_front() {
            seen.read.push(m);
            self.s
                .streams()
                .taken(id, wire::charge(seen.read.last().unwrap().len()));
        }
    }

    /// One tick: deliveries both ways, events, transmissions, timers.
    fn step(&mut self) {
        self.tick += 1;
        let now = self.now();
        for (imm, f) in std::mem::take(&mut self.to_s) {
            assert!(self.s_recvs > 0, "RNR at the server");
            self.s_recvs -= 1;
            if let Some(inc) = self.s.handle_frame(now, imm, &f) {
                assert!(inc.streaming);
                self.server.entry(inc.id).or_default().opened = true;
            }
            // Stream frames are copied out: the slot is reposted at once.
            self.s_recvs += 1;
        }
        self.s.streams().handle_timeout(now);
        while let Some((id, ev)) = self.s.poll_stream_event() {
            let seen = self.server.entry(id).or_default();
            match ev {
                ServerStreamEvent::Message(m) => seen.unread.push_back(m.to_vec()),
                ServerStreamEvent::HalfClosed => seen.half_closed = true,
                ServerStreamEvent::Writable => {}
                ServerStreamEvent::Reset(s) => seen.end = Some(Err(s)),
            }
        }
        if self.s_auto {
            let ids: Vec<u32> = self.server.keys().copied().collect();
            for id in ids {
                while !self.server[&id].unread.is_empty() {
                    self.server_take(id);
                }
            }
        }
        loop {
            let mut out = vec![0u8; FRAME];
            let Some(t) = self.s.poll_transmit(&mut out) else {
                break;
            };
            out.truncate(t.len);
            self.to_c.push_back((t.imm, out));
        }
        if let Some(lost) = &mut self.c_gone {
            lost.extend(self.to_c.drain(..));
            return;
        }
        for (imm, f) in std::mem::take(&mut self.to_c) {
            assert!(self.c_recvs > 0, "RNR at the client");
            self.c_recvs -= 1;
            assert!(self.c.handle_frame(now, imm, &f).is_none());
            self.c_recvs += 1;
            self.c.handle_tokens_returned(1);
        }
        if self.c_timers {
            self.c.handle_timeout(now);
        }
        self.drain_client_events();
        if self.c_auto {
            let ids: Vec<u32> = self.client.keys().copied().collect();
            for id in ids {
                while !self.client[&id].unread.is_empty() {
                    self.client_take(id);
                }
            }
        }
        loop {
            let mut out = vec![0u8; FRAME];
            let Some(t) = self.c.poll_transmit(&mut out) else {
                break;
            };
            out.truncate(t.len);
            self.to_s.push_back((t.imm, out));
        }
    }

    fn drain_client_events(&mut self) {
        while let Some((id, ev)) = self.c.poll_stream_event() {
            let seen = self.client.entry(id).or_default();
            match ev {
                StreamEvent::Headers(_) => seen.headers = true,
                StreamEvent::Message(arrived) => seen.unread.extend(arrived.map(|m| m.to_vec())),
                StreamEvent::Writable => {}
                StreamEvent::End(r) => {
                    assert!(seen.end.is_none(), "one end per call");
                    seen.end = Some(r.map(|_| ()));
                }
            }
        }
    }

    fn run(&mut self, ticks: u64) {
        for _ in 0..ticks {
            self.step();
        }
    }

    /// Nothing in flight, no call left, every credit back where it started.
    fn assert_quiescent(&mut self) {
        self.run(10);
        assert!(self.to_s.is_empty() && self.to_c.is_empty());
        assert_eq!(self.c.calls(), 0, "client table drained");
        assert_eq!(self.s.calls(), 0, "server table drained");
        assert_eq!(self.c.free_tokens(), CREDITS, "every token returned");
        assert!(
            self.s.streams().credits() >= SERVER_CREDITS / 2,
            "the server's connection credits came back"
        );
    }

    fn end(&self, id: u32) -> Option<Code> {
        self.client[&id]
            .end
            .as_ref()
            .map(|r| r.as_ref().err().map_or(Code::Ok, |s| s.code()))
    }
}

fn msg(call: u32, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (call as usize * 7 + i * 13 + k) as u8)
        .collect()
}

#[test]
fn interleaved_streams_each_get_their_own_messages_in_order_both_ways() {
    let mut sim = StreamSim::plain();
    let ids: Vec<u32> = (0..3).map(|_| sim.open(None)).collect();
    sim.run(2);
    for &id in &ids {
        assert!(sim.server[&id].opened);
        sim.server_answer(id, Ok(()));
    }
    // 40 messages each way per call, some longer than a frame, sent as credit and
    // tokens allow, the calls taking turns.
    let n = 40;
    let len = |i: usize| (i * 53) % 1500;
    let mut sent_c = [0usize; 3];
    let mut sent_s = [0usize; 3];
    for _ in 0..10_000 {
        for (k, &id) in ids.iter().enumerate() {
            if sent_c[k] < n && sim.client_send(id, &msg(id, sent_c[k], len(sent_c[k]))) {
                sent_c[k] += 1;
            }
            if sent_s[k] < n && sim.server_send(id, &msg(id + 1, sent_s[k], len(sent_s[k]))) {
                sent_s[k] += 1;
            }
        }
        sim.step();
        if sent_c.iter().chain(&sent_s).all(|&x| x == n) && sim.to_s.is_empty() {
            break;
        }
    }
    sim.run(20);
    for &id in &ids {
        let want_s: Vec<Vec<u8>> = (0..n).map(|i| msg(id, i, len(i))).collect();
        let want_c: Vec<Vec<u8>> = (0..n).map(|i| msg(id + 1, i, len(i))).collect();
        assert_eq!(
            sim.server[&id].read, want_s,
            "server got call {id}'s messages"
        );
        assert_eq!(
            sim.client[&id].read, want_c,
            "client got call {id}'s messages"
        );
        sim.c.streams().half_close(id);
    }
    sim.run(3);
    for &id in &ids {
        assert!(sim.server[&id].half_closed);
        sim.s.streams().finish(id, Ok(MetadataMap::new()));
    }
    sim.run(3);
    for &id in &ids {
        assert_eq!(sim.end(id), Some(Code::Ok));
    }
    sim.assert_quiescent();
}

#[test]
fn half_close_in_either_order_ends_the_call_ok() {
    // The client's half first, then the server's messages and trailers.
    let mut sim = StreamSim::plain();
    let id = sim.open(None);
    sim.run(2);
    sim.server_answer(id, Ok(()));
    assert!(sim.client_send(id, b"only"));
    sim.c.streams().half_close(id);
    sim.run(3);
    assert!(sim.server[&id].half_closed);
    assert_eq!(sim.server[&id].read, vec![b"only".to_vec()]);
    assert!(sim.server_send(id, b"reply"));
    sim.s.streams().finish(id, Ok(MetadataMap::new()));
    sim.run(3);
    assert_eq!(sim.client[&id].read, vec![b"reply".to_vec()]);
    assert_eq!(sim.end(id), Some(Code::Ok));
    sim.assert_quiescent();

    // The server's end first: the client's later half-close is harmless.
    let mut sim = StreamSim::plain();
    let id = sim.open(None);
    sim.run(2);
    sim.server_answer(id, Ok(()));
    assert!(sim.server_send(id, b"a"));
    sim.s.streams().finish(id, Ok(MetadataMap::new()));
    sim.run(3);
    assert_eq!(sim.end(id), Some(Code::Ok));
    assert!(!sim.client_send(id, b"late"), "an ended call sends nothing");
    sim.c.streams().half_close(id);
    sim.assert_quiescent();
}

#[test]
fn a_reset_in_every_state_ends_both_sides_and_frees_everything() {
    let states = [
        "before the headers",
        "after the headers",
        "mid-message",
        "after the client's half-close",
        "after the server's end",
    ];
    for (k, state) in states.iter().enumerate() {
        let mut sim = StreamSim::plain();
        let id = sim.open(None);
        sim.run(2);
        if k >= 1 {
            sim.server_answer(id, Ok(()));
            sim.run(2);
        }
        if k == 2 {
            // A message of several frames, reset while its fragments are going.
            assert!(sim.client_send(id, &msg(id, 0, 5000)));
            sim.step();
        }
        if k == 3 {
            sim.c.streams().half_close(id);
            sim.run(2);
        }
        if k == 4 {
            sim.s.streams().finish(id, Ok(MetadataMap::new()));
            sim.run(2);
        }
        sim.c.streams().reset(id, Status::cancelled("gave up"));
        sim.drain_client_events();
        sim.run(3);
        let want = if k == 4 { Code::Ok } else { Code::Cancelled };
        assert_eq!(sim.end(id), Some(want), "{state}");
        if k < 4 {
            let end = sim.server[&id].end.as_ref().expect(state);
            assert_eq!(end.as_ref().unwrap_err().code(), Code::Cancelled, "{state}");
        }
        if k == 0 {
            // The handler answers late: nothing more is sent for the call.
            sim.server_answer(id, Ok(()));
        }
        sim.assert_quiescent();
    }
}

/// Messages of `len` bytes that begin within one window.
fn per_window(len: usize) -> usize {
    per_window_of(STREAM_WINDOW, len)
}

/// Messages of `len` bytes that begin within a window of `size` bytes.
fn per_window_of(size: u32, len: usize) -> usize {
    (u64::from(size).div_ceil(wire::charge(len))) as usize
}

/// A window of four times the wire's, as `initial_stream_window_size(4 MiB)` sets.
const LARGE: u32 = 4 * STREAM_WINDOW;

#[test]
fn a_larger_client_window_comes_with_the_headers_and_bounds_the_server() {
    let mut sim = StreamSim::with_windows(LARGE, STREAM_WINDOW);
    sim.c_auto = false;
    let id = sim.open(None);
    sim.run(2);
    assert_eq!(
        sim.s.streams().send_credit(id),
        i64::from(STREAM_WINDOW),
        "before its headers the call has the wire's window"
    );
    sim.server_answer(id, Ok(()));
    sim.run(3);
    assert_eq!(sim.s.streams().send_credit(id), i64::from(LARGE));
    let sent = sim.fill_window(id, 100);
    assert_eq!(
        sent,
        per_window_of(LARGE, 100),
        "the larger window of bytes"
    );
    sim.run(5);
    assert!(!sim.s.streams().can_send(id), "the reader took nothing");
    assert_eq!(
        sim.client[&id].unread.len(),
        sent,
        "every message, none refused"
    );
    assert!(sim.client[&id].end.is_none());
    // The grant back is a quarter of this window, not of the wire's.
    for _ in 0..per_window_of(LARGE / 4, 100) - 1 {
        sim.client_take(id);
    }
    sim.run(3);
    assert!(
        !sim.s.streams().can_send(id),
        "not a quarter of the window yet"
    );
    sim.client_take(id);
    sim.client_take(id);
    sim.run(3);
    assert!(sim.s.streams().can_send(id), "credit came back");
    sim.s.streams().finish(id, Ok(MetadataMap::new()));
    sim.c_auto = true;
    sim.run(5);
    assert_eq!(sim.end(id), Some(Code::Ok));
    sim.assert_quiescent();
}

#[test]
fn a_larger_server_window_is_granted_as_the_call_opens_and_bounds_the_client() {
    let mut sim = StreamSim::with_windows(STREAM_WINDOW, LARGE);
    sim.s_auto = false;
    let id = sim.open(None);
    sim.run(3);
    // Before the handler answers (a client stream's handler reads first).
    assert_eq!(sim.c.streams().send_credit(id), i64::from(LARGE));
    let mut sent = 0;
    while sim.c.streams().can_send(id) {
        if !sim.client_send(id, &msg(id, sent, 100)) {
            sim.step();
            continue;
        }
        sent += 1;
    }
    assert_eq!(
        sent,
        per_window_of(LARGE, 100),
        "the larger window of bytes"
    );
    sim.run(5);
    assert_eq!(
        sim.server[&id].unread.len(),
        sent,
        "every message, none refused"
    );
    assert!(sim.server[&id].end.is_none());
    sim.s_auto = true;
    sim.run(3);
    assert!(sim.c.streams().can_send(id), "credit came back once read");
    sim.server_answer(id, Ok(()));
    sim.s.streams().finish(id, Ok(MetadataMap::new()));
    sim.run(5);
    assert_eq!(sim.end(id), Some(Code::Ok));
    sim.assert_quiescent();
}

#[test]
fn a_window_is_at_least_the_wires_and_at_most_http2s_largest() {
    use crate::engine::stream::stream_window;
    assert_eq!(stream_window(64 << 10), STREAM_WINDOW);
    assert_eq!(stream_window(LARGE), LARGE);
    assert_eq!(stream_window(u32::MAX), i32::MAX as u32);
    // A window below the wire's grants nothing at open: the peer keeps the wire's.
    let mut sim = StreamSim::with_windows(64 << 10, 64 << 10);
    let id = sim.open(None);
    sim.run(2);
    sim.server_answer(id, Ok(()));
    sim.run(3);
    assert_eq!(sim.s.streams().send_credit(id), i64::from(STREAM_WINDOW));
    assert_eq!(sim.c.streams().send_credit(id), i64::from(STREAM_WINDOW));
}

#[test]
fn an_exhausted_window_stops_only_its_producer_and_resumes_when_read() {
    let mut sim = StreamSim::plain();
    sim.c_auto = false;
    let slow = sim.open(None);
    let fast = sim.open(None);
    sim.run(2);
    sim.server_answer(slow, Ok(()));
    sim.server_answer(fast, Ok(()));
    let sent = sim.fill_window(slow, 1);
    assert_eq!(sent, per_window(1), "a window of bytes, then no credit");
    sim.run(5);
    assert!(!sim.s.streams().can_send(slow), "the reader took nothing");
    // The other call on the connection keeps moving, for several windows.
    let n = 3 * per_window(10);
    let mut moved = 0;
    while moved < n {
        let batch: Vec<Vec<u8>> = (moved..n.min(moved + 100))
            .map(|i| msg(fast, i, 10))
            .collect();
        moved += sim.server_send_batch(fast, &batch);
        sim.step();
        while !sim.client[&fast].unread.is_empty() {
            sim.client_take(fast);
        }
    }
    sim.run(5);
    while !sim.client[&fast].unread.is_empty() {
        sim.client_take(fast);
    }
    let want: Vec<Vec<u8>> = (0..n).map(|i| msg(fast, i, 10)).collect();
    assert_eq!(sim.client[&fast].read, want, "every message, in order");
    assert_eq!(sim.client[&slow].unread.len(), per_window(1));
    // Reading a quarter of the window grants it back.
    for _ in 0..per_window(1) / 4 - 1 {
        sim.client_take(slow);
    }
    sim.run(3);
    assert!(!sim.s.streams().can_send(slow), "not a quarter yet");
    sim.client_take(slow);
    sim.client_take(slow);
    sim.run(3);
    assert!(sim.s.streams().can_send(slow), "credit came back");
    for id in [slow, fast] {
        sim.s.streams().finish(id, Ok(MetadataMap::new()));
    }
    sim.c_auto = true;
    sim.run(5);
    sim.assert_quiescent();
}

#[test]
fn a_deadline_mid_stream_ends_the_call_at_both_ends() {
    let mut sim = StreamSim::plain();
    let id = sim.open(Some(Duration::from_millis(20)));
    sim.run(2);
    sim.server_answer(id, Ok(()));
    for i in 0..5 {
        assert!(sim.server_send(id, &msg(id, i, 30)));
        sim.step();
    }
    assert_eq!(sim.end(id), None);
    sim.run(20);
    assert_eq!(sim.end(id), Some(Code::DeadlineExceeded));
    assert_eq!(sim.client[&id].read.len(), 5);
    let end = sim.server[&id].end.as_ref().unwrap();
    assert_eq!(end.as_ref().unwrap_err().code(), Code::DeadlineExceeded);
    assert!(!sim.s.streams().is_open(id));
    sim.assert_quiescent();
}

#[test]
fn a_receiver_refusing_an_oversized_message_tells_the_sender() {
    // The server accepts 1000 bytes; this client would send more.
    let mut sim = StreamSim::new((1 << 20, 1 << 20), (1 << 20, 1000));
    let id = sim.open(None);
    sim.run(2);
    sim.server_answer(id, Ok(()));
    sim.run(2);
    assert!(sim.client_send(id, &msg(id, 0, 3000)));
    sim.run(10);
    assert_eq!(sim.end(id), Some(Code::ResourceExhausted));
    let s = sim.client[&id].end.as_ref().unwrap().as_ref().unwrap_err();
    assert!(s.message().contains("exceeds the limit of 1000"), "{s:?}");
    let end = sim.server[&id].end.as_ref().unwrap();
    assert_eq!(end.as_ref().unwrap_err().code(), Code::ResourceExhausted);
    sim.assert_quiescent();

    // The client accepts 1000 bytes; this server would send more.
    let mut sim = StreamSim::new((1 << 20, 1000), (1 << 20, 1 << 20));
    let id = sim.open(None);
    sim.run(2);
    sim.server_answer(id, Ok(()));
    sim.run(2);
    assert!(sim.server_send(id, &msg(id, 0, 3000)));
    sim.run(10);
    assert_eq!(sim.end(id), Some(Code::ResourceExhausted));
    let end = sim.server[&id].end.as_ref().unwrap();
    assert_eq!(end.as_ref().unwrap_err().code(), Code::ResourceExhausted);
    sim.assert_quiescent();
}

#[test]
fn connection_credits_come_back_while_many_streams_send() {
    // More server frames than the server's connection credits, on many calls: the
    // client returns them as it reposts, and nothing lands without a receive.
    let mut sim = StreamSim::plain();
    let ids: Vec<u32> = (0..6).map(|_| sim.open(None)).collect();
    sim.run(2);
    for &id in &ids {
        sim.server_answer(id, Ok(()));
    }
    let per = 3 * SERVER_CREDITS as usize;
    let mut sent = vec![0usize; ids.len()];
    for _ in 0..100_000 {
        for (k, &id) in ids.iter().enumerate() {
            if sent[k] < per && sim.server_send(id, &msg(id, sent[k], 700)) {
                sent[k] += 1;
            }
        }
        sim.step();
        if sent.iter().all(|&s| s == per) {
            break;
        }
    }
    sim.run(10);
    for &id in &ids {
        assert_eq!(sim.client[&id].read.len(), per);
        sim.s.streams().finish(id, Ok(MetadataMap::new()));
    }
    sim.run(5);
    sim.assert_quiescent();
}

#[test]
fn a_handler_failing_before_its_headers_ends_the_call_trailers_only() {
    let mut sim = StreamSim::plain();
    let id = sim.open(None);
    sim.run(2);
    sim.server_answer(id, Err(Status::not_found("no such thing")));
    sim.run(2);
    assert_eq!(sim.end(id), Some(Code::NotFound));
    assert!(!sim.client[&id].headers);
    sim.assert_quiescent();
}

/// The server's end of a call, if it had one (a reset, a refusal, its deadline).
fn server_end(sim: &StreamSim, id: u32) -> Option<Status> {
    sim.server[&id].end.clone().and_then(Result::err)
}

#[test]
fn the_servers_deadline_ends_a_stream_after_its_handler_answered() {
    // The client's timer stays silent: the server ends the call on its own, with
    // trailers the client reads, and the handler's producer is stopped.
    let mut sim = StreamSim::plain();
    sim.c_timers = false;
    let id = sim.open(Some(Duration::from_millis(20)));
    sim.run(2);
    sim.server_answer(id, Ok(()));
    for i in 0..3 {
        assert!(sim.server_send(id, &msg(id, i, 30)));
        sim.step();
    }
    assert!(sim.s.streams().deadline(id).is_some());
    assert_eq!(sim.s.streams().poll_timeout(), sim.s.streams().deadline(id));
    assert_eq!(sim.end(id), None, "still running before the deadline");
    sim.run(25);
    let s = server_end(&sim, id).expect("the handler hears the deadline");
    assert_eq!(s.code(), Code::DeadlineExceeded);
    assert!(
        !sim.s.streams().is_open(id),
        "the producer may send no more"
    );
    assert_eq!(sim.s.streams().poll_timeout(), None, "no timer left");
    assert_eq!(sim.end(id), Some(Code::DeadlineExceeded));
    let c = sim.client[&id].end.as_ref().unwrap().as_ref().unwrap_err();
    assert!(c.message().contains("on the server"), "{c:?}");
    assert_eq!(sim.client[&id].read.len(), 3, "messages before it arrive");
    sim.assert_quiescent();
}

#[test]
fn the_servers_deadline_before_the_handler_answered_ends_the_call_trailers_only() {
    let mut sim = StreamSim::plain();
    sim.c_timers = false;
    let id = sim.open(Some(Duration::from_millis(20)));
    sim.run(25);
    assert_eq!(
        server_end(&sim, id).map(|s| s.code()),
        Some(Code::DeadlineExceeded)
    );
    assert_eq!(sim.end(id), Some(Code::DeadlineExceeded));
    assert!(!sim.client[&id].headers);
    // The handler answers late: nothing more goes.
    sim.server_answer(id, Ok(()));
    assert!(sim.to_c.is_empty());
    sim.assert_quiescent();
}

#[test]
fn the_servers_deadline_ends_a_stream_whose_client_went_silent() {
    // The producer filled the window and waits for credit the silent client will
    // never grant: the deadline stops it, and the trailers still go (connection
    // credits remain).
    let mut sim = StreamSim::plain();
    sim.c_auto = false;
    let id = sim.open(Some(Duration::from_millis(200)));
    sim.run(2);
    sim.server_answer(id, Ok(()));
    sim.run(2);
    let sent = sim.fill_window(id, 30);
    assert_eq!(sent, per_window(30));
    sim.run(2);
    sim.c_gone = Some(Vec::new());
    sim.run(200);
    assert_eq!(
        server_end(&sim, id).map(|s| s.code()),
        Some(Code::DeadlineExceeded),
        "the handler hears the deadline with no word from the client"
    );
    assert!(!sim.s.streams().is_open(id));
    let lost = sim.c_gone.take().unwrap();
    let (imm, trailers) = lost.last().expect("frames went to the client");
    assert_eq!(wire::parse_imm(*imm).unwrap().0, Kind::Trailers);
    match codec::read_response(trailers).unwrap().outcome {
        codec::Outcome::Status(s) => assert_eq!(s.code(), Code::DeadlineExceeded),
        codec::Outcome::Ok(_) => panic!("trailers OK at a deadline"),
    }
    assert_eq!(sim.s.calls(), 0, "the server forgot the call");

    // Mid-message, the connection's credits spent on it: the deadline drops the
    // rest of the message and the producer; nothing goes beyond the receives the
    // client posted (the trailers wait for credits the client no longer returns).
    let mut sim = StreamSim::plain();
    let id = sim.open(Some(Duration::from_millis(20)));
    sim.run(2);
    sim.server_answer(id, Ok(()));
    sim.run(2);
    sim.c_gone = Some(Vec::new());
    assert!(sim.server_send(id, &msg(id, 0, 2 * SERVER_CREDITS as usize * FRAME)));
    sim.run(25);
    assert_eq!(
        server_end(&sim, id).map(|s| s.code()),
        Some(Code::DeadlineExceeded)
    );
    assert!(!sim.s.streams().is_open(id));
    let lost = sim.c_gone.take().unwrap();
    assert_eq!(
        lost.len(),
        SERVER_CREDITS as usize,
        "no frame without a receive"
    );
    sim.c_gone = Some(Vec::new());
    sim.run(5);
    assert!(
        sim.c_gone.take().unwrap().is_empty(),
        "nothing more of the message after the deadline"
    );
}

#[test]
fn a_batch_delivers_its_messages_whole_and_in_order_in_one_frame() {
    let mut sim = StreamSim::plain();
    let id = sim.open(None);
    sim.run(2);
    sim.server_answer(id, Ok(()));
    sim.run(2);
    // More than one frame's worth of ready messages: consecutive whole batches.
    let msgs: Vec<Vec<u8>> = (0..60).map(|i| msg(id, i, 1 + i % 20)).collect();
    let mut went = 0;
    let mut frames = 0;
    while went < msgs.len() {
        went += sim.server_send_batch(id, &msgs[went..]);
        frames += 1;
    }
    assert!(frames > 1 && frames < 10, "{frames} frames for 60 messages");
    assert_eq!(sim.to_c.len(), frames, "one MSG per batch");
    sim.run(3);
    assert_eq!(sim.client[&id].read, msgs);
    // A message larger than the space left goes next, in chunks of its own, and
    // lands after the batch's messages.
    let small: Vec<Vec<u8>> = (0..10).map(|i| msg(id, 100 + i, 40)).collect();
    let big = msg(id, 200, 3 * FRAME);
    assert_eq!(
        sim.server_send_batch(id, &[small.clone(), vec![big.clone()]].concat()),
        10
    );
    assert!(sim.server_send(id, &big));
    sim.run(10);
    let read = &sim.client[&id].read;
    assert_eq!(&read[60..70], &small[..]);
    assert_eq!(read[70], big);
    sim.s.streams().finish(id, Ok(MetadataMap::new()));
    sim.run(3);
    assert_eq!(sim.end(id), Some(Code::Ok));
    sim.assert_quiescent();
}

#[test]
fn client_batches_reach_the_handler_whole_and_in_order() {
    let mut sim = StreamSim::plain();
    let id = sim.open(None);
    sim.run(2);
    sim.server_answer(id, Ok(()));
    sim.run(2);
    let msgs: Vec<Vec<u8>> = (0..30).map(|i| msg(id, i, 7)).collect();
    assert!(sim.c.reserve());
    let mut staged = vec![0u8; FRAME];
    let mut b = wire::BatchWriter::new(&mut staged);
    for m in &msgs {
        assert!(b.push(m.len(), |o| o.copy_from_slice(m)));
    }
    let len = b.finish();
    let mut out = vec![0u8; FRAME];
    let t = sim
        .c
        .send_stream_batch(id, &staged[..len], &mut out)
        .unwrap();
    out.truncate(t.len);
    sim.to_s.push_back((t.imm, out));
    sim.run(3);
    assert_eq!(sim.server[&id].read, msgs);
    sim.c.streams().half_close(id);
    sim.run(2);
    sim.s.streams().finish(id, Ok(MetadataMap::new()));
    sim.assert_quiescent();
}

/// A batch `MSG` of `entries` (each `len:u32` then bytes), with a head that says
/// `count` messages and `bytes` bytes.
fn raw_batch(count: u32, bytes: u32, entries: &[u8]) -> Vec<u8> {
    let mut f = count.to_be_bytes().to_vec();
    f.extend((wire::MSG_BATCH | bytes).to_be_bytes());
    f.extend_from_slice(entries);
    f
}

#[test]
fn a_malformed_batch_ends_its_call_internal_delivers_nothing_and_spares_the_connection() {
    let entry = |len: u32, fill: u8| {
        let mut e = len.to_be_bytes().to_vec();
        e.extend(std::iter::repeat_n(fill, len as usize));
        e
    };
    let two = [entry(3, 1), entry(2, 2)].concat();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a count above its entries",
            raw_batch(3, two.len() as u32, &two),
        ),
        (
            "a count below its entries",
            raw_batch(1, two.len() as u32, &two),
        ),
        ("an empty batch", raw_batch(0, 0, &[])),
        (
            "bytes that are not the frame's",
            raw_batch(2, two.len() as u32 + 1, &two),
        ),
        ("an entry beyond the frame", {
            let mut e = two.clone();
            e[3] = 200;
            raw_batch(2, e.len() as u32, &e)
        }),
        ("an entry cut in its length", {
            let mut e = two.clone();
            e.extend([0, 0]);
            raw_batch(2, e.len() as u32, &e)
        }),
        ("the reserved rendezvous bit", {
            let mut f = raw_batch(2, two.len() as u32, &two);
            f[4] |= 0x80;
            f
        }),
    ];
    let mut sim = StreamSim::plain();
    for (why, frame) in cases {
        let id = sim.open(None);
        sim.run(2);
        sim.server_answer(id, Ok(()));
        sim.run(2);
        let before = sim.c.stats().malformed;
        sim.to_c.push_back((wire::imm(Kind::Msg, id), frame));
        sim.run(3);
        assert_eq!(sim.end(id), Some(Code::Internal), "{why}");
        assert!(sim.client[&id].read.is_empty(), "{why}: nothing delivered");
        assert_eq!(sim.c.stats().malformed, before + 1, "{why}: counted");
        // The client's RESET reached the server; the connection goes on.
        assert!(!sim.s.streams().is_open(id), "{why}");
    }
    // The server sending such a batch mid-message is malformed too.
    let id = sim.open(None);
    sim.run(2);
    sim.server_answer(id, Ok(()));
    sim.run(2);
    let mut first = vec![0u8; 8 + 10];
    wire::write_msg_head(&mut first, 0, 100);
    sim.to_c.push_back((wire::imm(Kind::Msg, id), first));
    let one = [7u32.to_be_bytes().to_vec(), vec![9; 7]].concat();
    sim.to_c.push_back((
        wire::imm(Kind::Msg, id),
        raw_batch(1, one.len() as u32, &one),
    ));
    sim.run(3);
    assert_eq!(sim.end(id), Some(Code::Internal));
    // A client batch the server cannot read ends that call, and only that one.
    let bad = sim.open(None);
    let good = sim.open(None);
    sim.run(2);
    sim.server_answer(bad, Ok(()));
    sim.server_answer(good, Ok(()));
    sim.run(2);
    // Sent by the engine (its token counted), then corrupted on the way.
    assert!(sim.c.reserve());
    let mut staged = vec![0u8; FRAME];
    let mut b = wire::BatchWriter::new(&mut staged);
    assert!(b.push(3, |o| o.copy_from_slice(b"abc")) && b.push(2, |o| o.copy_from_slice(b"de")));
    let len = b.finish();
    let mut out = vec![0u8; FRAME];
    let t = sim
        .c
        .send_stream_batch(bad, &staged[..len], &mut out)
        .unwrap();
    out.truncate(t.len);
    out[3] = 5; // says five messages
    sim.to_s.push_back((t.imm, out));
    sim.run(3);
    assert_eq!(sim.end(bad), Some(Code::Internal), "the server's trailers");
    assert!(sim.server[&bad].read.is_empty(), "nothing delivered");
    assert!(sim.client_send(good, b"still here"));
    sim.run(3);
    assert_eq!(sim.server[&good].read, vec![b"still here".to_vec()]);
    sim.c.streams().half_close(good);
    sim.run(2);
    sim.s.streams().finish(good, Ok(MetadataMap::new()));
    sim.assert_quiescent();
}

#[test]
fn a_batch_beyond_the_calls_credit_is_refused_unsent() {
    let mut sim = StreamSim::plain();
    sim.c_auto = false;
    let id = sim.open(None);
    sim.run(2);
    sim.server_answer(id, Ok(()));
    sim.run(2);
    sim.fill_window(id, 100);
    sim.run(2);
    let mut staged = vec![0u8; FRAME];
    let mut b = wire::BatchWriter::new(&mut staged);
    assert!(b.push(3, |o| o.copy_from_slice(b"abc")));
    let len = b.finish();
    let mut out = vec![0u8; FRAME];
    assert!(sim
        .s
        .send_stream_batch(id, &staged[..len], &mut out)
        .is_err());
}

#[test]
fn the_server_gets_connection_credits_only_once_the_client_streams() {
    let mut sim = StreamSim::plain();
    assert_eq!(sim.s.streams().credits(), 0, "none before any stream");
    assert!(
        !sim.c.streams().receives_wanted(),
        "no receives posted for it"
    );
    let id = sim.open(None);
    assert_eq!(
        sim.c_recvs,
        CREDITS + SERVER_CREDITS,
        "posted on the first stream"
    );
    assert!(!sim.c.streams().receives_wanted(), "once");
    sim.run(2);
    assert_eq!(
        sim.s.streams().credits(),
        SERVER_CREDITS,
        "granted with the open"
    );
    let second = sim.open(None);
    assert_eq!(sim.c_recvs, CREDITS + SERVER_CREDITS, "not again");
    sim.run(2);
    for id in [id, second] {
        sim.server_answer(id, Ok(()));
        sim.s.streams().finish(id, Ok(MetadataMap::new()));
    }
    sim.assert_quiescent();
}
