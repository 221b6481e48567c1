//! Bodies by reference between a client and a server engine, frames delivered in
//! order and RDMA Reads simulated against each side's lent regions (a Read outside
//! them fails as the device fails it, `REM_ACCESS_ERR`).

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::sim::Raw;
use crate::code::Code;
use crate::engine::gather::{gather_len, ByRef, Gather, Piece, MAX_GATHER_PARTS};
use crate::engine::wire::{self, Descriptor, Kind};
use crate::engine::{
    CallHead, ClientConfig, ClientConn, Completion, Incoming, ReadOp, Reply, RequestBody,
    ServerConfig, ServerConn, Transmit,
};
use crate::metadata::MetadataMap;
use crate::status::Status;

const FRAME: usize = 1024;
const THRESHOLD: usize = 4096;
const MAX: usize = 1 << 20;

/// Memory a side lent: (descriptor, bytes).
#[derive(Default)]
struct Lent(Vec<(Descriptor, Vec<u8>)>);

impl Lent {
    fn lend(&mut self, addr: u64, data: Vec<u8>) -> Descriptor {
        let d = Descriptor {
            addr,
            rkey: 0x5a5a,
            len: data.len() as u32,
        };
        self.0.push((d, data));
        d
    }

    /// A Read as the device does it: inside a lent region under its key, or fails.
    fn read(&self, d: Descriptor) -> Result<Vec<u8>, Status> {
        for (r, data) in &self.0 {
            let end = d.addr.checked_add(u64::from(d.len));
            if d.rkey == r.rkey
                && d.addr >= r.addr
                && end.is_some_and(|e| e <= r.addr + u64::from(r.len))
            {
                let at = (d.addr - r.addr) as usize;
                return Ok(data[at..at + d.len as usize].to_vec());
            }
        }
        Err(Status::unavailable("RDMA Read failed: RemAccessErr"))
    }

    /// A gather list's Reads and inline runs, placed in order.
    fn gather(&self, g: &Gather) -> Result<Vec<u8>, Status> {
        let mut out = Vec::new();
        for p in g.pieces() {
            match p {
                Piece::Inline(b) => out.extend_from_slice(b),
                Piece::Ref(d) => out.extend(self.read(d)?),
            }
        }
        Ok(out)
    }
}

struct Pair {
    c: ClientConn<u64>,
    s: ServerConn,
    now: Instant,
    to_server: VecDeque<(u32, Vec<u8>)>,
    to_client: VecDeque<(u32, Vec<u8>)>,
    client_lent: Lent,
    server_lent: Lent,
    done: Vec<Completion<u64>>,
    incoming: Vec<Incoming>,
}

impl Pair {
    fn new() -> Pair {
        let mut s = ServerConn::new(ServerConfig {
            frame_size: FRAME,
            max_recv_message: MAX,
            max_send_message: MAX,
            buffer_cap: 4 * MAX,
        });
        s.set_rendezvous(THRESHOLD);
        Pair {
            c: ClientConn::new(ClientConfig {
                credits: 8,
                frame_size: FRAME,
                max_send_message: MAX,
                max_recv_message: MAX,
            })
            .with_rendezvous(THRESHOLD),
            s,
            now: Instant::now(),
            to_server: VecDeque::new(),
            to_client: VecDeque::new(),
            client_lent: Lent::default(),
            server_lent: Lent::default(),
            done: Vec::new(),
            incoming: Vec::new(),
        }
    }

    fn sent(q: &mut VecDeque<(u32, Vec<u8>)>, out: &[u8], t: Transmit) {
        q.push_back((t.imm, out[..t.len].to_vec()));
    }

    /// A call whose request body goes by reference at `addr`.
    fn call_by_ref(&mut self, tag: u64, addr: u64, body: Vec<u8>) -> u32 {
        let desc = self.client_lent.lend(addr, body);
        self.start_by_ref(tag, ByRef::One(desc))
    }

    /// A call whose request body is lent as `body` (a descriptor or a list).
    fn start_by_ref(&mut self, tag: u64, body: ByRef<'_>) -> u32 {
        assert!(self.c.request_by_ref(body.body_len()));
        assert!(self.c.reserve());
        let md = MetadataMap::new();
        let mut out = vec![0u8; FRAME];
        let (id, t) = self
            .c
            .start_call_by_ref(
                self.now,
                tag,
                &CallHead::new("/p.S/M", &md, None),
                body,
                &mut out,
            )
            .unwrap();
        Self::sent(&mut self.to_server, &out, t);
        id
    }

    /// Delivers every frame and performs every Read until nothing moves.
    fn run(&mut self) {
        let mut out = vec![0u8; FRAME];
        loop {
            let mut moved = false;
            while let Some((imm, f)) = self.to_server.pop_front() {
                moved = true;
                self.incoming.extend(self.s.handle_frame(self.now, imm, &f));
            }
            while let Some(op) = self.s.poll_read() {
                moved = true;
                let r = match &op.gather {
                    Some(g) => self.client_lent.gather(g),
                    None => self.client_lent.read(op.desc),
                }
                .map(|b| prefixed(&op, b));
                self.incoming.extend(self.s.handle_read_done(op.id, r));
            }
            while let Some(t) = self.s.poll_transmit(&mut out) {
                moved = true;
                Self::sent(&mut self.to_client, &out, t);
            }
            while let Some((imm, f)) = self.to_client.pop_front() {
                moved = true;
                self.done.extend(self.c.handle_frame(self.now, imm, &f));
                self.c.handle_tokens_returned(1);
            }
            while let Some(op) = self.c.poll_read() {
                moved = true;
                let r = match &op.gather {
                    Some(g) => self.server_lent.gather(g),
                    None => self.server_lent.read(op.desc),
                }
                .map(Bytes::from);
                self.done.extend(self.c.handle_read_done(op.id, r));
            }
            while let Some(t) = self.c.poll_transmit(&mut out) {
                moved = true;
                Self::sent(&mut self.to_server, &out, t);
            }
            if !moved {
                return;
            }
        }
    }

    /// Answers a dispatched call with `body` lent by reference at `addr`.
    fn respond_by_ref(&mut self, id: u32, addr: u64, body: Vec<u8>) {
        assert!(self.s.response_by_ref(body.len()));
        let desc = self.server_lent.lend(addr, body);
        let mut out = vec![0u8; FRAME];
        let (t, lent) = self
            .s
            .respond_by_ref(id, &MetadataMap::new(), ByRef::One(desc), &mut out)
            .expect("running");
        assert!(lent);
        Self::sent(&mut self.to_client, &out, t);
    }

    fn released_by_client(&mut self) -> Vec<u32> {
        std::iter::from_fn(|| self.c.poll_released()).collect()
    }

    fn released_by_server(&mut self) -> Vec<u32> {
        std::iter::from_fn(|| self.s.poll_released()).collect()
    }
}

/// What the server's driver hands back: the frame's head (zeros here: the test
/// reads only the body) and the body after it.
fn prefixed(op: &ReadOp, body: Vec<u8>) -> Bytes {
    let mut v = vec![0u8; op.head_len];
    v.extend(body);
    Bytes::from(v)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

#[test]
fn request_and_response_by_reference_round_trip_and_release_both_regions() {
    let mut p = Pair::new();
    let req = pattern(100_000, 1);
    let id = p.call_by_ref(7, 0x1000, req.clone());
    p.run();
    let inc = p.incoming.pop().expect("dispatched after the Read");
    let RequestBody::Shared(b) = &inc.bytes else {
        panic!("read by reference")
    };
    assert_eq!(&b[inc.body.clone()], &req[..]);
    assert!(
        p.released_by_client().is_empty(),
        "lent until the REQ's answer"
    );
    assert_eq!(p.s.by_ref_in_flight(), 0);

    let resp = pattern(200_000, 2);
    p.respond_by_ref(id, 0x9000, resp.clone());
    p.run();
    assert_eq!(
        p.released_by_client(),
        vec![id],
        "the RESP answered the REQ"
    );
    assert_eq!(
        p.released_by_server(),
        vec![id],
        "the RDONE released the response"
    );
    let c = p.done.pop().expect("completed");
    assert_eq!(c.waiter, 7);
    match c.result {
        Ok(Reply::Shared { body, .. }) => assert_eq!(&body[..], &resp[..]),
        r => panic!("{r:?}"),
    }
    assert_eq!(p.c.calls(), 0, "RDONE answered: nothing owed");
    assert_eq!(p.c.free_tokens(), 8, "every token back");
    assert_eq!(p.c.stats().malformed + p.s.stats().malformed, 0);
}

#[test]
fn a_response_cancelled_while_read_is_released_by_the_cancel() {
    let mut p = Pair::new();
    let id = p.call_by_ref(1, 0x1000, pattern(10_000, 3));
    p.run();
    assert_eq!(p.incoming.len(), 1);
    let desc = p.server_lent.lend(0x9000, pattern(50_000, 4));
    let mut out = vec![0u8; FRAME];
    let (t, _) =
        p.s.respond_by_ref(id, &MetadataMap::new(), ByRef::One(desc), &mut out)
            .unwrap();
    // The RESP arrives; the client starts its Read, then gives up.
    p.done.extend(p.c.handle_frame(p.now, t.imm, &out[..t.len]));
    p.c.handle_tokens_returned(1);
    let op = p.c.poll_read().expect("a Read to do");
    p.c.cancel(id);
    p.run();
    assert_eq!(
        p.released_by_server(),
        vec![id],
        "CANCEL released the region"
    );
    // The Read ends after the cancel: nothing completes, no RDONE goes.
    assert!(p.c.handle_read_done(op.id, Ok(Bytes::new())).is_none());
    p.run();
    assert!(p.done.is_empty());
    assert_eq!(p.s.stats().malformed, 0, "no RDONE for a forgotten call");
    assert_eq!(p.c.free_tokens(), 8);
}

#[test]
fn a_request_cancelled_while_read_is_answered_once_the_read_ends() {
    let mut p = Pair::new();
    let id = p.call_by_ref(1, 0x1000, pattern(10_000, 5));
    let (imm, f) = p.to_server.pop_front().unwrap();
    assert!(p.s.handle_frame(p.now, imm, &f).is_none(), "read first");
    let op = p.s.poll_read().expect("a Read");
    p.c.cancel(id);
    let mut out = vec![0u8; FRAME];
    let t = p.c.poll_transmit(&mut out).expect("CANCEL");
    assert_eq!(wire::parse_imm(t.imm), Some((Kind::Cancel, id)));
    assert!(p.s.handle_frame(p.now, t.imm, &out[..t.len]).is_none());
    // Only the CANCEL's CR so far: the client's region is still being read.
    while let Some(t) = p.s.poll_transmit(&mut out) {
        p.c.handle_frame(p.now, t.imm, &out[..t.len]);
        p.c.handle_tokens_returned(1);
    }
    assert!(p.released_by_client().is_empty(), "still lent while read");
    let r = p.client_lent.read(op.desc).map(|b| prefixed(&op, b));
    assert!(p.s.handle_read_done(op.id, r).is_none(), "not dispatched");
    p.run();
    assert_eq!(p.released_by_client(), vec![id]);
    assert!(p.done.is_empty(), "the caller gave up: nothing completes");
    assert_eq!(p.c.calls(), 0);
    assert_eq!(p.c.free_tokens(), 8);
}

#[test]
fn a_hostile_response_descriptor_fails_its_call_as_the_read_fails() {
    let mut p = Pair::new();
    let id = p.call_by_ref(1, 0x1000, pattern(10_000, 6));
    p.run();
    // The server lends nothing at the address it names: the Read fails.
    let desc = Descriptor {
        addr: 0xdead_0000,
        rkey: 0x5a5a,
        len: 60_000,
    };
    let mut out = vec![0u8; FRAME];
    let (t, _) =
        p.s.respond_by_ref(id, &MetadataMap::new(), ByRef::One(desc), &mut out)
            .unwrap();
    Pair::sent(&mut p.to_client, &out, t);
    p.run();
    let c = p.done.pop().expect("ended");
    let e = c.result.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert!(e.message().contains("RemAccessErr"), "{e:?}");
}

#[test]
fn a_descriptor_beyond_the_limit_is_refused_without_a_read() {
    let mut p = Pair::new();
    // A request over the server's max message: answered at once, nothing read.
    let md = MetadataMap::new();
    let mut out = vec![0u8; FRAME];
    let n =
        crate::engine::codec::write_request(&CallHead::new("/p.S/M", &md, None), MAX + 1, &mut out)
            .unwrap();
    wire::set_request_by_ref(&mut out);
    Descriptor {
        addr: 0x1000,
        rkey: 1,
        len: (MAX + 1) as u32,
    }
    .write(&mut out[n..]);
    // As the server sees a raw peer's frame.
    let imm = wire::imm(Kind::Req, 9);
    assert!(p
        .s
        .handle_frame(p.now, imm, &out[..n + wire::DESCRIPTOR_LEN])
        .is_none());
    assert!(p.s.poll_read().is_none(), "nothing read");
    let t = p.s.poll_transmit(&mut out).expect("answered");
    let start = crate::engine::codec::read_response(&out[..t.len]).unwrap();
    match start.outcome {
        crate::engine::codec::Outcome::Status(s) => {
            assert_eq!(s.code(), Code::ResourceExhausted);
            assert!(s.message().contains(&MAX.to_string()), "{s:?}");
        }
        o => panic!("{o:?}"),
    }

    // A response over the client's max: the call fails, a CANCEL frees the region.
    let id = p.call_by_ref(2, 0x1000, pattern(10_000, 7));
    p.run();
    let desc = Descriptor {
        addr: 0x9000,
        rkey: 0x5a5a,
        len: (MAX + 1) as u32,
    };
    let (t, _) =
        p.s.respond_by_ref(id, &MetadataMap::new(), ByRef::One(desc), &mut out)
            .unwrap();
    Pair::sent(&mut p.to_client, &out, t);
    p.run();
    assert_eq!(
        p.done.pop().unwrap().result.unwrap_err().code(),
        Code::ResourceExhausted
    );
    assert_eq!(p.released_by_server(), vec![id]);
}

#[test]
fn without_rdma_read_agreed_a_body_by_reference_is_malformed() {
    let mut s = ServerConn::new(ServerConfig {
        frame_size: FRAME,
        max_recv_message: MAX,
        max_send_message: MAX,
        buffer_cap: 4 * MAX,
    });
    let mut c = ClientConn::<u64>::new(ClientConfig {
        credits: 4,
        frame_size: FRAME,
        max_send_message: MAX,
        max_recv_message: MAX,
    });
    assert!(!c.request_by_ref(MAX) && !s.response_by_ref(MAX));
    let md = MetadataMap::new();
    let mut out = vec![0u8; FRAME];
    let n =
        crate::engine::codec::write_request(&CallHead::new("/p.S/M", &md, None), 5000, &mut out)
            .unwrap();
    wire::set_request_by_ref(&mut out);
    Descriptor {
        addr: 1,
        rkey: 1,
        len: 5000,
    }
    .write(&mut out[n..]);
    let imm = wire::imm(Kind::Req, 3);
    assert!(s
        .handle_frame(Instant::now(), imm, &out[..n + 16])
        .is_none());
    assert!(s.poll_read().is_none());
    assert_eq!(s.stats().malformed, 1);
    let t = s.poll_transmit(&mut out).unwrap();
    let start = crate::engine::codec::read_response(&out[..t.len]).unwrap();
    assert!(matches!(
        start.outcome,
        crate::engine::codec::Outcome::Status(ref st) if st.code() == Code::Internal
    ));
    // A small call still works inline on that engine.
    assert!(c.reserve());
    let (_, t) = c
        .start_call(
            Instant::now(),
            1,
            &CallHead::new("/p.S/M", &md, None),
            &Raw(vec![1, 2, 3]),
            &mut out,
        )
        .unwrap();
    assert!(!wire::request_is_by_ref(&out[..t.len]));
}

#[test]
fn a_lost_peer_ends_calls_being_read_and_drops_their_reads() {
    let mut p = Pair::new();
    let id = p.call_by_ref(1, 0x1000, pattern(10_000, 8));
    p.run();
    let desc = p.server_lent.lend(0x9000, pattern(50_000, 9));
    let mut out = vec![0u8; FRAME];
    let (t, _) =
        p.s.respond_by_ref(id, &MetadataMap::new(), ByRef::One(desc), &mut out)
            .unwrap();
    p.c.handle_frame(p.now, t.imm, &out[..t.len]);
    p.c.handle_peer_lost(Status::unavailable("connection lost"));
    assert!(p.c.poll_read().is_none(), "no Read left to start");
    let c = p.c.poll_completion().expect("ended");
    assert_eq!(c.result.unwrap_err().code(), Code::Unavailable);
    assert!(p.c.handle_read_done(id, Ok(Bytes::new())).is_none());
}

#[test]
fn a_response_as_a_gather_list_is_placed_in_order_and_released_by_its_rdone() {
    let mut p = Pair::new();
    let id = p.call_by_ref(3, 0x1000, pattern(10_000, 1));
    p.run();
    assert_eq!(p.incoming.len(), 1);
    // What the server received earlier and now lends where it lies, with the
    // protobuf framing and a short field inline around two slices of it.
    let held = pattern(300_000, 5);
    let whole = p.server_lent.lend(0x40_0000, held.clone());
    let slice = |at: usize, len: usize| Descriptor {
        addr: whole.addr + at as u64,
        len: len as u32,
        ..whole
    };
    let pieces = [
        Piece::Inline(b"\x0a\x03"),
        Piece::Ref(slice(1000, 100_000)),
        Piece::Inline(b"xyz"),
        Piece::Ref(slice(0, 7)),
    ];
    let mut out = vec![0u8; FRAME];
    let (t, lent) =
        p.s.respond_by_ref(id, &MetadataMap::new(), ByRef::Gather(&pieces), &mut out)
            .expect("running");
    assert!(lent);
    Pair::sent(&mut p.to_client, &out, t);
    p.run();
    let mut expected = b"\x0a\x03".to_vec();
    expected.extend_from_slice(&held[1000..101_000]);
    expected.extend_from_slice(b"xyz");
    expected.extend_from_slice(&held[..7]);
    match p.done.pop().expect("completed").result {
        Ok(Reply::Shared { body, .. }) => assert!(body[..] == expected[..], "placed in order"),
        r => panic!("{r:?}"),
    }
    assert_eq!(
        p.released_by_server(),
        vec![id],
        "one RDONE releases the list"
    );
    assert_eq!(p.c.stats().malformed + p.s.stats().malformed, 0);
}

#[test]
fn a_request_as_a_gather_list_is_placed_after_its_head_and_released_by_the_answer() {
    let mut p = Pair::new();
    // A client lending its request's `Bytes` field where it lies, the protobuf
    // framing inline before it.
    let field = pattern(50_000, 3);
    let lent = p.client_lent.lend(0x7000_0000, field.clone());
    let pieces = [Piece::Inline(b"\x0a\xd0\x86\x03"), Piece::Ref(lent)];
    let id = p.start_by_ref(4, ByRef::Gather(&pieces));
    p.run();
    let inc = p.incoming.pop().expect("dispatched after the Reads");
    let RequestBody::Shared(b) = &inc.bytes else {
        panic!("read by reference")
    };
    let mut expected = b"\x0a\xd0\x86\x03".to_vec();
    expected.extend_from_slice(&field);
    assert!(b[inc.body.clone()] == expected[..], "placed in order");
    assert!(p.released_by_client().is_empty(), "lent until the answer");
    let mut out = vec![0u8; FRAME];
    let md = MetadataMap::new();
    let t = p.s.respond(id, Ok((&md, &Raw(b"ok".to_vec()))), &mut out);
    Pair::sent(&mut p.to_client, &out, t.expect("running"));
    p.run();
    assert_eq!(p.released_by_client(), vec![id], "the RESP released it");
    assert!(p.done.pop().expect("completed").result.is_ok());
    assert_eq!(p.c.stats().malformed + p.s.stats().malformed, 0);
}

#[test]
fn a_request_gather_reference_outside_what_was_lent_ends_the_call_and_releases_it() {
    let mut p = Pair::new();
    let lent = p.client_lent.lend(0x7000_0000, pattern(50_000, 3));
    let beyond = Descriptor {
        addr: lent.addr + 40_000,
        len: 20_000, // 10,000 bytes past what was lent
        ..lent
    };
    let id = p.start_by_ref(
        4,
        ByRef::Gather(&[Piece::Inline(b"ab"), Piece::Ref(beyond)]),
    );
    p.run();
    assert!(p.incoming.is_empty(), "nothing dispatched");
    let e = p.done.pop().expect("answered").result.expect_err("failed");
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert_eq!(
        p.released_by_client(),
        vec![id],
        "answered: never read again"
    );
}

#[test]
fn a_gather_reference_outside_what_was_lent_fails_the_call_as_a_bad_descriptor_does() {
    let mut p = Pair::new();
    let id = p.call_by_ref(3, 0x1000, pattern(10_000, 1));
    p.run();
    let lent = p.server_lent.lend(0x40_0000, pattern(70_000, 5));
    let pieces = [
        Piece::Inline(b"ab"),
        Piece::Ref(Descriptor {
            addr: lent.addr + 60_000,
            len: 20_000, // 10,000 bytes past the region
            ..lent
        }),
    ];
    let mut out = vec![0u8; FRAME];
    let (t, _) =
        p.s.respond_by_ref(id, &MetadataMap::new(), ByRef::Gather(&pieces), &mut out)
            .expect("running");
    Pair::sent(&mut p.to_client, &out, t);
    p.run();
    let r = p.done.pop().expect("completed").result;
    let e = r.expect_err("failed");
    assert_eq!(e.code(), crate::Code::Unavailable, "{e:?}");
    assert_eq!(
        p.released_by_server(),
        vec![id],
        "released: it will not read again"
    );
}

#[test]
fn a_malformed_gather_list_ends_the_call_internal_and_its_cancel_releases_the_body() {
    // Each way of breaking a list, applied to a well-formed RESP: parts that do not
    // sum to the stated length, too many parts announced, a list cut short.
    let tampers: [fn(&mut Vec<u8>, usize); 3] = [
        |f, _| f[3] = f[3].wrapping_add(1),
        |f, at| f[at + 1] = (MAX_GATHER_PARTS + 1) as u8,
        |f, _| {
            f.pop();
        },
    ];
    for (k, tamper) in tampers.into_iter().enumerate() {
        let mut p = Pair::new();
        let id = p.call_by_ref(1, 0x1000, pattern(10_000, 1));
        p.run();
        let lent = p.server_lent.lend(0x40_0000, pattern(70_000, 5));
        let pieces = [Piece::Inline(b"ab"), Piece::Ref(lent)];
        let mut out = vec![0u8; FRAME];
        let (t, _) =
            p.s.respond_by_ref(id, &MetadataMap::new(), ByRef::Gather(&pieces), &mut out)
                .expect("running");
        let mut f = out[..t.len].to_vec();
        let at = f.len() - gather_len(&pieces);
        tamper(&mut f, at);
        p.done.extend(p.c.handle_frame(p.now, t.imm, &f));
        p.c.handle_tokens_returned(1);
        p.run();
        let e = p.done.pop().expect("ended").result.expect_err("malformed");
        assert_eq!(e.code(), Code::Internal, "case {k}: {e:?}");
        assert_eq!(p.c.stats().malformed, 1, "case {k}");
        assert!(p.c.poll_read().is_none(), "case {k}: nothing read");
        assert_eq!(
            p.released_by_server(),
            vec![id],
            "case {k}: CANCEL released it"
        );
    }
}
