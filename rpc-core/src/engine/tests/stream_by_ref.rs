//! Stream messages by reference over a simulated fabric: both engines, the RDMA
//! Reads done by the test from the memory each side lent, one tick each way.
//! Checked: the frames (one `MSG` with a descriptor, one `RDONE` back), the order
//! of delivery among inline messages and the stream's end, and that every lent
//! message is released exactly once, whether read or refused.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;

use crate::code::Code;
use crate::engine::rendezvous::ReadOp;
use crate::engine::wire::{self, Descriptor, Kind};
use crate::engine::{
    CallHead, ClientConfig, ClientConn, ServerConfig, ServerConn, ServerStreamEvent, StreamEvent,
};
use crate::metadata::MetadataMap;
use crate::status::Status;

const FRAME: usize = 512;
const THRESHOLD: usize = 1000;
const MAX: usize = 1 << 20;

/// What one side saw of the call, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Msg(Vec<u8>),
    /// Client: the trailers (or a status); server: half-close (`Ok`) or a reset.
    End(Result<(), Code>),
}

struct Pair {
    c: ClientConn<u64>,
    s: ServerConn,
    to_s: VecDeque<(u32, Vec<u8>)>,
    to_c: VecDeque<(u32, Vec<u8>)>,
    /// Memory each side lent, by address.
    c_lent: HashMap<u64, Vec<u8>>,
    s_lent: HashMap<u64, Vec<u8>>,
    next_addr: u64,
    /// Reads asked for and not yet done.
    c_reads: VecDeque<ReadOp>,
    s_reads: VecDeque<ReadOp>,
    /// Reads wait while set (a slow RDMA Read).
    hold_reads: bool,
    client: Vec<Ev>,
    server: Vec<Ev>,
    /// Frames seen on the wire, by kind, both ways.
    kinds: Vec<Kind>,
    now: Instant,
}

impl Pair {
    fn new(client_max_recv: usize, rendezvous: bool) -> Pair {
        let mut c = ClientConn::new(ClientConfig {
            credits: 8,
            frame_size: FRAME,
            max_send_message: MAX,
            max_recv_message: client_max_recv,
        });
        let mut s = ServerConn::new(ServerConfig {
            frame_size: FRAME,
            max_recv_message: MAX,
            max_send_message: MAX,
            buffer_cap: 1 << 20,
        });
        if rendezvous {
            c = c.with_rendezvous(THRESHOLD);
        }
        // The server side may agree even when the client does not, to send.
        s.set_rendezvous(THRESHOLD);
        Pair {
            c,
            s,
            to_s: VecDeque::new(),
            to_c: VecDeque::new(),
            c_lent: HashMap::new(),
            s_lent: HashMap::new(),
            next_addr: 0x10_000,
            c_reads: VecDeque::new(),
            s_reads: VecDeque::new(),
            hold_reads: false,
            client: Vec::new(),
            server: Vec::new(),
            kinds: Vec::new(),
            now: Instant::now(),
        }
    }

    /// Opens a streaming call and answers it with headers.
    fn open(&mut self) -> u32 {
        assert!(self.c.reserve());
        let mut out = vec![0u8; FRAME];
        let md = MetadataMap::new();
        let (id, t) = self
            .c
            .start_stream(self.now, &CallHead::new("/p.S/M", &md, None), &mut out)
            .unwrap();
        out.truncate(t.len);
        self.to_s.push_back((t.imm, out));
        self.c.streams().receives_posted();
        self.step();
        let mut out = vec![0u8; FRAME];
        let t = self.s.respond_stream(id, Ok(&md), &mut out).unwrap();
        out.truncate(t.len);
        self.to_c.push_back((t.imm, out));
        self.run(3);
        id
    }

    fn lend(&mut self, data: &[u8]) -> Descriptor {
        let addr = self.next_addr;
        self.next_addr += 0x10_0000;
        Descriptor {
            addr,
            rkey: 9,
            len: data.len() as u32,
        }
    }

    fn server_send(&mut self, id: u32, m: &[u8]) {
        assert!(self.s.streams().can_send(id), "the server may send");
        let mut out = vec![0u8; FRAME];
        let t = if m.len() > THRESHOLD {
            let d = self.lend(m);
            self.s_lent.insert(d.addr, m.to_vec());
            self.s.send_stream_message_by_ref(id, d, &mut out).unwrap()
        } else {
            self.s
                .send_stream_message(id, m.len(), |o| o.copy_from_slice(m), &mut out)
                .unwrap()
        };
        out.truncate(t.len);
        self.to_c.push_back((t.imm, out));
    }

    fn client_send(&mut self, id: u32, m: &[u8]) {
        assert!(self.c.streams().can_send(id) && self.c.reserve());
        let mut out = vec![0u8; FRAME];
        let t = if m.len() > THRESHOLD {
            let d = self.lend(m);
            self.c_lent.insert(d.addr, m.to_vec());
            self.c.send_stream_message_by_ref(id, d, &mut out).unwrap()
        } else {
            self.c
                .send_stream_message(id, m.len(), |o| o.copy_from_slice(m), &mut out)
                .unwrap()
        };
        out.truncate(t.len);
        self.to_s.push_back((t.imm, out));
    }

    /// Reads `op` from `lent` as the device would: the bytes, or a failure for
    /// memory never lent.
    fn read(lent: &HashMap<u64, Vec<u8>>, op: &ReadOp) -> Result<Bytes, Status> {
        match lent.get(&op.desc.addr) {
            Some(m) if m.len() == op.desc.len as usize => Ok(Bytes::copy_from_slice(m)),
            _ => Err(Status::unavailable("REM_ACCESS_ERR")),
        }
    }

    fn step(&mut self) {
        for (imm, f) in std::mem::take(&mut self.to_s) {
            self.kinds.push(wire::parse_imm(imm).unwrap().0);
            if let Some(inc) = self.s.handle_frame(self.now, imm, &f) {
                assert!(inc.streaming, "only the call's opening is dispatched");
            }
        }
        while let Some(op) = self.s.poll_read() {
            self.s_reads.push_back(op);
        }
        while !self.hold_reads {
            let Some(op) = self.s_reads.pop_front() else {
                break;
            };
            let r = Self::read(&self.c_lent, &op);
            assert!(self.s.handle_read_done(op.id, r).is_none());
        }
        while let Some(addr) = self.s.poll_released_message() {
            assert!(self.s_lent.remove(&addr).is_some(), "released once");
        }
        while let Some((id, ev)) = self.s.poll_stream_event() {
            match ev {
                ServerStreamEvent::Message(m) => {
                    self.s.streams().taken(id, wire::charge(m.len()));
                    self.server.push(Ev::Msg(m.to_vec()));
                }
                ServerStreamEvent::HalfClosed => self.server.push(Ev::End(Ok(()))),
                ServerStreamEvent::Reset(s) => self.server.push(Ev::End(Err(s.code()))),
                ServerStreamEvent::Writable => {}
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
        for (imm, f) in std::mem::take(&mut self.to_c) {
            self.kinds.push(wire::parse_imm(imm).unwrap().0);
            assert!(self.c.handle_frame(self.now, imm, &f).is_none());
            self.c.handle_tokens_returned(1);
        }
        while let Some(op) = self.c.poll_read() {
            self.c_reads.push_back(op);
        }
        while !self.hold_reads {
            let Some(op) = self.c_reads.pop_front() else {
                break;
            };
            let r = Self::read(&self.s_lent, &op);
            assert!(self.c.handle_read_done(op.id, r).is_none());
        }
        while let Some(addr) = self.c.poll_released_message() {
            assert!(self.c_lent.remove(&addr).is_some(), "released once");
        }
        while let Some((id, ev)) = self.c.poll_stream_event() {
            match ev {
                StreamEvent::Message(arrived) => {
                    for m in arrived {
                        self.c.streams().taken(id, wire::charge(m.len()));
                        self.client.push(Ev::Msg(m.to_vec()));
                    }
                }
                StreamEvent::End(r) => self
                    .client
                    .push(Ev::End(r.map(|_| ()).map_err(|s| s.code()))),
                StreamEvent::Headers(_) | StreamEvent::Writable => {}
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

    fn run(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }
}

fn big(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ tag).collect()
}

#[test]
fn a_message_by_reference_keeps_its_place_before_later_messages_and_the_trailers() {
    let mut p = Pair::new(MAX, true);
    let id = p.open();
    let large = big(1, 100_000);
    p.hold_reads = true;
    p.server_send(id, b"first");
    p.server_send(id, &large);
    p.server_send(id, b"third");
    p.s.streams().finish(id, Ok(MetadataMap::new()));
    p.run(4);
    // The large message is one `MSG` (no chunks); while it is being read, what
    // came after it waits, the trailers too.
    let msgs = p.kinds.iter().filter(|k| **k == Kind::Msg).count();
    assert_eq!(msgs, 3, "one frame per message: {:?}", p.kinds);
    assert_eq!(p.client, vec![Ev::Msg(b"first".to_vec())]);
    assert_eq!(p.s_lent.len(), 1, "lent until read");
    p.hold_reads = false;
    p.run(4);
    assert_eq!(
        p.client,
        vec![
            Ev::Msg(b"first".to_vec()),
            Ev::Msg(large),
            Ev::Msg(b"third".to_vec()),
            Ev::End(Ok(())),
        ]
    );
    assert!(p.kinds.contains(&Kind::Rdone), "released by RDONE");
    assert!(p.s_lent.is_empty(), "the server's region is released");
    assert_eq!(p.s.streams().lent_messages(), 0);
}

#[test]
fn a_client_message_by_reference_reaches_the_handler_before_the_half_close() {
    let mut p = Pair::new(MAX, true);
    let id = p.open();
    let a = big(2, 5_000);
    let b = big(3, 70_000);
    p.hold_reads = true;
    p.client_send(id, &a);
    p.client_send(id, b"small");
    p.client_send(id, &b);
    p.c.streams().half_close(id);
    p.run(4);
    assert!(
        p.server.is_empty(),
        "everything waits behind the first read"
    );
    p.hold_reads = false;
    p.run(4);
    assert_eq!(
        p.server,
        vec![
            Ev::Msg(a),
            Ev::Msg(b"small".to_vec()),
            Ev::Msg(b),
            Ev::End(Ok(()))
        ]
    );
    assert!(p.c_lent.is_empty(), "both client regions released");
    assert_eq!(p.c.streams().lent_messages(), 0);
}

#[test]
fn a_message_by_reference_the_receiver_refuses_is_released_unread() {
    // The client takes at most 50,000 bytes: the 100,000-byte message is refused
    // (the call resets RESOURCE_EXHAUSTED) and never read, yet released.
    let mut p = Pair::new(50_000, true);
    let id = p.open();
    p.server_send(id, &big(4, 100_000));
    p.run(4);
    assert_eq!(p.client, vec![Ev::End(Err(Code::ResourceExhausted))]);
    assert!(p.c_reads.is_empty(), "nothing read");
    assert!(p.s_lent.is_empty(), "released by the RDONE of the refusal");
    assert_eq!(p.server, vec![Ev::End(Err(Code::ResourceExhausted))]);
}

#[test]
fn a_message_by_reference_after_the_call_ended_here_is_released_unread() {
    let mut p = Pair::new(MAX, true);
    let id = p.open();
    // The client resets; the server's message crosses the RESET on the wire.
    p.c.streams().reset(id, Status::cancelled("gone"));
    p.server_send(id, &big(5, 10_000));
    p.run(6);
    assert!(p.c_reads.is_empty(), "nothing read for an ended call");
    assert!(p.s_lent.is_empty(), "released all the same");
    assert_eq!(p.c.calls(), 0);
}

#[test]
fn a_read_that_fails_ends_the_call_and_still_releases() {
    let mut p = Pair::new(MAX, true);
    let id = p.open();
    p.server_send(id, &big(6, 10_000));
    // The lent memory no longer covers the descriptor: the Read fails as
    // REM_ACCESS_ERR would.
    p.s_lent.values_mut().for_each(|m| m.truncate(1));
    p.run(3);
    assert_eq!(p.client, vec![Ev::End(Err(Code::Unavailable))]);
    assert!(p.s_lent.is_empty(), "the RDONE still came");
    assert_eq!(p.s.streams().lent_messages(), 0);
}

#[test]
fn without_rdma_read_agreed_a_message_by_reference_is_malformed() {
    let mut p = Pair::new(MAX, false);
    let id = p.open();
    p.server_send(id, &big(7, 10_000));
    p.run(3);
    assert!(p.c_reads.is_empty(), "never read");
    assert_eq!(p.client, vec![Ev::End(Err(Code::Internal))]);
    assert!(p.c.stats().malformed > 0);
}
