//! Large responses lent where their bytes lie (`docs/large-messages.md`, "Lending
//! received bytes where they lie"): a handler that echoes, or returns a slice of, a
//! large `bytes` field it received answers without the server copying it: the
//! client reads those bytes from the server's read pool, through a window bound over
//! exactly them, beside the protobuf framing sent inline in the `RESP`. The server's
//! `PoolStats::lent_in_place` counts them; every byte arrives as sent; the region
//! stays the server's until the client's `RDONE`, whatever the handler dropped, and
//! comes back when the client dies instead. On a device without memory windows, or
//! to a client that did not offer `GATHER_LISTS`, the bytes are copied as before
//! (and the counter stays 0).

use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prost::bytes::Bytes;
use rpc_core::client::Grpc;
use rpc_core::fuzzing::codec::{read_response, write_request, Outcome};
use rpc_core::fuzzing::gather::{Gather, Piece};
use rpc_core::fuzzing::handshake::Capabilities;
use rpc_core::fuzzing::wire::{
    imm, parse_imm, response_is_gather, set_request_by_ref, Descriptor, Kind, DESCRIPTOR_LEN,
};
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Channel, Endpoint, RendezvousStats, Server};
use rpc_core::{Request, Response, Status};
use rpc_transport::{AccessFlags, MemoryRegion, WcStatus};
use tests::init_tracing;
use tests::raw_rc::RawRcClient;
use tokio::sync::oneshot;

const THRESHOLD: usize = 32 * 1024;
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// A message with a large `bytes` field decoded as `Bytes` (sharing the buffer it
/// was read into), as `rpc-codegen`'s `.bytes(".")` generates.
#[derive(Clone, PartialEq, prost::Message)]
struct Blob {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(bytes = "bytes", tag = "2")]
    data: Bytes,
    /// For `Slice`: the part of `data` to return.
    #[prost(uint64, tag = "3")]
    at: u64,
    #[prost(uint64, tag = "4")]
    len: u64,
}

/// `Echo` returns the request; `Slice` the part `at..at + len` of its data; `Copy`
/// the data copied into memory of the handler's own.
#[derive(Clone)]
struct BlobService;

impl NamedService for BlobService {
    const NAME: &'static str = "test.Blob";
}

impl tower::Service<ServerCall> for BlobService {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        Box::pin(async move {
            let method = call.method().to_string();
            let m = call.into_request::<Blob>()?.into_inner();
            let data = match method.as_str() {
                "Echo" => m.data,
                "Slice" => m.data.slice(m.at as usize..(m.at + m.len) as usize),
                "Copy" => Bytes::from(m.data.to_vec()),
                other => return Err(Status::unimplemented(other.to_string())),
            };
            // The request (and its buffer) is dropped here: only the response's
            // `data` refers to what was received.
            let reply = Blob {
                id: m.id,
                data,
                at: 0,
                len: 0,
            };
            Ok(Response::new(ReplyBody::message(reply)))
        })
    }
}

async fn serve(stats: &RendezvousStats) -> (SocketAddr, oneshot::Sender<()>) {
    init_tracing();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let builder = Server::builder()
        .max_message_size(MAX_MESSAGE)
        .rendezvous_threshold(THRESHOLD)
        .rendezvous_stats(stats.clone());
    tokio::spawn(async move {
        builder
            .add_service(BlobService)
            .serve_with_listener(listener, async move {
                let _ = rx.await;
            })
            .await
            .expect("server runs");
    });
    (addr, tx)
}

async fn channel(addr: SocketAddr, stats: &RendezvousStats) -> Channel {
    Endpoint::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .max_message_size(MAX_MESSAGE)
        .rendezvous_threshold(THRESHOLD)
        .rendezvous_stats(stats.clone())
        .connect()
        .await
        .unwrap()
}

fn pattern(seed: u64, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(131).wrapping_add(seed * 7) as u8)
        .collect::<Vec<u8>>()
        .into()
}

async fn call(ch: &Channel, method: &str, m: Blob) -> Blob {
    let mut g = Grpc::new(ch.clone());
    let path: &'static str = match method {
        "Echo" => "/test.Blob/Echo",
        "Slice" => "/test.Blob/Slice",
        "Copy" => "/test.Blob/Copy",
        _ => unreachable!(),
    };
    g.unary::<Blob, Blob>(Request::new(m), path)
        .await
        .unwrap_or_else(|e| panic!("{method}: {e:?}"))
        .into_inner()
}

/// Whether the default device binds type-2 memory windows (the server then lends
/// received bytes where they lie; without, it copies them).
fn windows() -> bool {
    let dev = rpc_transport::msg::open_device(None).expect("default RDMA device");
    dev.caps().mw_type2
}

/// Polls `stats` until every region is back, within 20 s (the server frees a lent
/// body once the client's `RDONE` arrived and its windows' invalidations completed).
async fn all_back(stats: &RendezvousStats) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats.get().in_use != 0 {
        assert!(
            Instant::now() < deadline,
            "regions not back: {:?}",
            stats.get()
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echoed_bodies_are_lent_where_they_lie_and_arrive_byte_for_byte() {
    let (srv, cli) = (RendezvousStats::new(), RendezvousStats::new());
    let (addr, _stop) = serve(&srv).await;
    let ch = channel(addr, &cli).await;
    let lends = windows();
    for (k, len) in [
        40_000usize,
        100_003,
        1 << 20,
        (1 << 20) + 17,
        4 << 20,
        (4 << 20) + 3,
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(k as u64, len);
        let before = srv.get().lent_in_place;
        let m = Blob {
            id: k as u64,
            data: data.clone(),
            ..Blob::default()
        };
        let r = call(&ch, "Echo", m).await;
        assert_eq!(r.id, k as u64);
        assert!(r.data == data, "{len} bytes came back changed");
        let lent = srv.get().lent_in_place - before;
        let expected = if lends { len as u64 } else { 0 };
        assert_eq!(lent, expected, "{len} bytes: lent in place, not copied");
    }
    all_back(&srv).await;
    all_back(&cli).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_of_a_request_is_lent_and_a_copy_is_not() {
    let (srv, cli) = (RendezvousStats::new(), RendezvousStats::new());
    let (addr, _stop) = serve(&srv).await;
    let ch = channel(addr, &cli).await;
    let data = pattern(9, 3 << 20);
    let (at, len) = (12_345usize, (2 << 20) + 7);
    let m = Blob {
        id: 1,
        data: data.clone(),
        at: at as u64,
        len: len as u64,
    };
    let r = call(&ch, "Slice", m.clone()).await;
    assert!(
        r.data == data.slice(at..at + len),
        "the slice came back changed"
    );
    drop(r); // its bytes share the client's read region
    let lent = srv.get().lent_in_place;
    assert_eq!(lent, if windows() { len as u64 } else { 0 });

    let r = call(&ch, "Copy", m).await;
    assert!(r.data == data, "the copy came back changed");
    drop(r);
    assert_eq!(
        srv.get().lent_in_place,
        lent,
        "bytes of the handler's own memory are copied"
    );
    all_back(&srv).await;
    all_back(&cli).await;
}

/// Whether the default device is the soft provider (a client there lends its
/// requests' `Bytes` where they lie; on a NIC it encodes them into its lend pool).
fn soft() -> bool {
    let dev = rpc_transport::msg::open_device(None).expect("default RDMA device");
    dev.caps().fabric == rpc_transport::Fabric::Soft
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_request_bytes_are_lent_where_they_lie_and_arrive_byte_for_byte() {
    let (srv, cli) = (RendezvousStats::new(), RendezvousStats::new());
    let (addr, _stop) = serve(&srv).await;
    let ch = channel(addr, &cli).await;
    let in_place = soft();
    for (k, len) in [40_000usize, 1 << 20, (4 << 20) + 3]
        .into_iter()
        .enumerate()
    {
        // 16 calls at once, all lending the same bytes (as a client resending one
        // payload does), each echoed whole.
        let data = pattern(k as u64, len);
        let before = cli.get().lent_in_place;
        let calls = (0..16u64).map(|i| {
            let m = Blob {
                id: i,
                data: data.clone(),
                ..Blob::default()
            };
            let ch = ch.clone();
            tokio::spawn(async move { call(&ch, "Echo", m).await })
        });
        for (i, c) in calls.collect::<Vec<_>>().into_iter().enumerate() {
            let r = c.await.expect("caller");
            assert_eq!(r.id, i as u64);
            assert!(r.data == data, "{len} bytes came back changed");
        }
        let lent = cli.get().lent_in_place - before;
        let expected = if in_place { 16 * len as u64 } else { 0 };
        assert_eq!(lent, expected, "{len} bytes: requests lent where they lie");
    }
    all_back(&srv).await;
    all_back(&cli).await;
}

/// A raw client that lends its request bodies (so its QP accepts the server's
/// Reads) and reads gathered responses by hand.
struct RawClient {
    raw: RawRcClient,
    out: MemoryRegion,
}

impl RawClient {
    async fn connect(addr: SocketAddr) -> RawClient {
        Self::connect_offering(addr, Capabilities::SUPPORTED).await
    }

    async fn connect_offering(addr: SocketAddr, offer: Capabilities) -> RawClient {
        let raw = RawRcClient::connect_offering(addr, 4, AccessFlags::REMOTE_READ, offer).await;
        let out = raw
            .pd
            .alloc_mr(1 << 20, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
            .unwrap();
        RawClient { raw, out }
    }

    /// Calls `Echo` with `m` (its body lent by reference); the response's frame.
    async fn echo(&mut self, id: u32, m: &Blob) -> Vec<u8> {
        let body = prost::Message::encode_to_vec(m);
        self.out.write(0, &body);
        let desc = Descriptor {
            addr: self.out.addr(),
            rkey: self.out.rkey(),
            len: body.len() as u32,
        };
        let slot = self.raw.free_slot().await;
        let buf = self.raw.ring.buf(&slot);
        let md = rpc_core::MetadataMap::new();
        let head = rpc_core::fuzzing::CallHead::new("/test.Blob/Echo", &md, None);
        let n = write_request(&head, body.len(), buf).unwrap();
        set_request_by_ref(buf);
        desc.write(&mut buf[n..]);
        self.raw
            .ring
            .post(slot, n + DESCRIPTOR_LEN, imm(Kind::Req, id))
            .unwrap();
        let (_, f) = self.raw.next_frame().await.expect("the response");
        assert!(matches!(read_response(&f).unwrap().outcome, Outcome::Ok(_)));
        f
    }

    /// Reads `d` with RDMA Read; the status and what landed.
    async fn read(&mut self, d: Descriptor) -> (WcStatus, Vec<u8>) {
        self.raw.read(d.addr, d.rkey, d.len).await
    }

    /// The body of a gathered response: its inline runs and its references read.
    async fn gathered(&mut self, g: &Gather) -> Vec<u8> {
        let mut body = Vec::new();
        for p in g.pieces().collect::<Vec<_>>() {
            match p {
                Piece::Inline(b) => body.extend_from_slice(b),
                Piece::Ref(d) => {
                    let (status, bytes) = self.read(d).await;
                    assert_eq!(status, WcStatus::Success, "{d:?}");
                    body.extend(bytes);
                }
            }
        }
        body
    }

    /// Tells the server it is done with call `id`'s response; waits for its answer.
    async fn done(&mut self, id: u32) {
        let slot = self.raw.free_slot().await;
        self.raw.ring.post(slot, 0, imm(Kind::Rdone, id)).unwrap();
        let (imm, _) = self.raw.next_frame().await.expect("the RDONE's answer");
        assert_eq!(parse_imm(imm).map(|(k, _)| k), Some(Kind::Cr));
    }
}

/// The gather list of a `RESP` frame that must carry one.
fn gather_of(f: &[u8]) -> Gather {
    assert!(response_is_gather(f), "a gathered response");
    read_response(f)
        .unwrap()
        .gather
        .expect("a well-formed list")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_lent_in_place_stays_readable_until_rdone_and_only_until() {
    let srv = RendezvousStats::new();
    let (addr, _stop) = serve(&srv).await;
    let mut c = RawClient::connect(addr).await;
    let m = Blob {
        id: 3,
        data: pattern(3, 300_000),
        ..Blob::default()
    };
    let f = c.echo(1, &m).await;
    if !c.raw.dev.caps().mw_type2 {
        // No windows: the server copied the body into a region of its lend pool.
        assert!(!response_is_gather(&f) && read_response(&f).unwrap().by_ref.is_some());
        assert_eq!(srv.get().lent_in_place, 0);
        return;
    }
    let g = gather_of(&f);
    // The handler returned and dropped the request; the region it was read into is
    // still the server's (lent), and nothing else is.
    let s = srv.get();
    assert_eq!((s.regions_in_use, s.lent_in_place), (1, 300_000), "{s:?}");
    let expected = prost::Message::encode_to_vec(&m);
    assert!(c.gathered(&g).await == expected, "the echo, byte for byte");
    assert!(
        c.gathered(&g).await == expected,
        "readable again before RDONE"
    );
    c.done(1).await;
    all_back(&srv).await;
    // After RDONE its window is invalidated: the same reference reads nothing.
    let d = g
        .pieces()
        .find_map(|p| match p {
            Piece::Ref(d) => Some(d),
            Piece::Inline(_) => None,
        })
        .unwrap();
    assert_eq!(c.read(d).await.0, WcStatus::RemAccessErr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_dies_holding_a_body_lent_in_place_gives_every_region_back() {
    let srv = RendezvousStats::new();
    let (addr, _stop) = serve(&srv).await;
    let mut c = RawClient::connect(addr).await;
    for id in 1..=3u32 {
        let m = Blob {
            id: u64::from(id),
            data: pattern(u64::from(id), 200_000),
            ..Blob::default()
        };
        let f = c.echo(id, &m).await;
        if c.raw.dev.caps().mw_type2 {
            gather_of(&f);
        }
    }
    // Three responses lent, none released (no RDONE): three regions held. Without
    // windows each was copied into a lend region, and a request's read region
    // goes back only once its handler's task dropped the request, which may
    // follow the RESP: wait for that.
    let deadline = Instant::now() + Duration::from_secs(20);
    while srv.get().regions_in_use != 3 {
        assert!(Instant::now() < deadline, "{:?}", srv.get());
        tokio::task::yield_now().await;
    }
    drop(c);
    all_back(&srv).await;
    // The server goes on serving.
    let cli = RendezvousStats::new();
    let ch = channel(addr, &cli).await;
    let data = pattern(7, 100_000);
    let m = Blob {
        id: 7,
        data: data.clone(),
        ..Blob::default()
    };
    assert!(call(&ch, "Echo", m).await.data == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_gather_lists_gets_a_single_descriptor() {
    let srv = RendezvousStats::new();
    let (addr, _stop) = serve(&srv).await;
    let older = Capabilities::from_bits(
        Capabilities::SUPPORTED.bits() & !Capabilities::GATHER_LISTS.bits(),
    );
    let mut c = RawClient::connect_offering(addr, older).await;
    assert!(c.raw.grant.capabilities.contains(Capabilities::RDMA_READ));
    let m = Blob {
        id: 4,
        data: pattern(4, 300_000),
        ..Blob::default()
    };
    let f = c.echo(1, &m).await;
    assert!(!response_is_gather(&f), "copied and lent as one body");
    let d = read_response(&f).unwrap().by_ref.expect("by reference");
    let (status, body) = c.read(d).await;
    assert_eq!(status, WcStatus::Success);
    assert!(body == prost::Message::encode_to_vec(&m));
    assert_eq!(srv.get().lent_in_place, 0);
    c.done(1).await;
    all_back(&srv).await;
}
