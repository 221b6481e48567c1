//! What a hostile client can read of a server's lent bodies (`docs/large-messages.md`,
//! "Exposure"). Where the server's device has type-2 memory windows, each response
//! body is lent through a window bound to exactly its bytes on the client's own QP
//! and invalidated on its `RDONE`: a descriptor replayed after that, or one learned
//! from another connection, reads nothing (`REM_ACCESS_ERR`), and the server keeps
//! serving everyone else. Without windows (siw; the soft `iwarp_like` profile) the
//! region's own rkey is lent, and the exposure the page states is asserted instead:
//! the old descriptor reads the region again, now holding another call's body.

use rpc_core::client::Grpc;
use rpc_core::fuzzing::codec::{read_response, write_request, Outcome};
use rpc_core::fuzzing::wire::{imm, set_request_by_ref, Descriptor, Kind, DESCRIPTOR_LEN};
use rpc_core::transport::{Channel, Endpoint, RendezvousStats, Server};
use rpc_core::Request;
use rpc_transport::{AccessFlags, MemoryRegion, WcStatus};
use std::time::{Duration, Instant};
use tests::raw_rc::RawRcClient;
use tests::{init_tracing, path, seeded, serve_echo, Echo};
use tokio::sync::oneshot;

const THRESHOLD: usize = 32 * 1024;
/// Each body: above the threshold, one 128 KiB pool region.
const DATA: usize = 100_000;

async fn echo_server() -> (std::net::SocketAddr, RendezvousStats, oneshot::Sender<()>) {
    init_tracing();
    let stats = RendezvousStats::new();
    let builder = Server::builder()
        .rendezvous_threshold(THRESHOLD)
        .rendezvous_stats(stats.clone());
    let (tx, rx) = oneshot::channel::<()>();
    let (addr, _task) = serve_echo(builder, async move {
        let _ = rx.await;
    })
    .await;
    (addr, stats, tx)
}

async fn channel(addr: std::net::SocketAddr) -> Channel {
    Endpoint::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .rendezvous_threshold(THRESHOLD)
        .connect()
        .await
        .unwrap()
}

async fn echo(ch: &Channel, id: u64, data: Vec<u8>) -> Vec<u8> {
    let mut g = Grpc::new(ch.clone());
    let r = g
        .unary::<Echo, Echo>(Request::new(Echo { id, data }), path("Echo"))
        .await
        .expect("echo");
    r.into_inner().data
}

/// A raw client that lends its requests' bodies (so its QP accepts the server's
/// Reads) and reads responses lent by reference by hand.
struct Hostile {
    raw: RawRcClient,
    /// Its request bodies, lent to the server.
    out: MemoryRegion,
}

impl Hostile {
    async fn connect(addr: std::net::SocketAddr) -> Hostile {
        let raw = RawRcClient::connect(addr, 4, AccessFlags::REMOTE_READ).await;
        let out = raw
            .pd
            .alloc_mr(
                256 * 1024,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            )
            .unwrap();
        Hostile { raw, out }
    }

    /// Calls `Echo` with `data` (its body lent by reference) and returns the
    /// descriptor of the response body the server lends, and that body's bytes.
    async fn call(&mut self, id: u32, data: Vec<u8>) -> (Descriptor, Vec<u8>) {
        let body = prost::Message::encode_to_vec(&Echo {
            id: u64::from(id),
            data,
        });
        self.out.write(0, &body);
        let desc = Descriptor {
            addr: self.out.addr(),
            rkey: self.out.rkey(),
            len: body.len() as u32,
        };
        let slot = self.raw.free_slot().await;
        let buf = self.raw.ring.buf(&slot);
        let md = rpc_core::MetadataMap::new();
        let head = rpc_core::fuzzing::CallHead::new(path("Echo"), &md, None);
        let n = write_request(&head, body.len(), buf).unwrap();
        set_request_by_ref(buf);
        desc.write(&mut buf[n..]);
        self.raw
            .ring
            .post(slot, n + DESCRIPTOR_LEN, imm(Kind::Req, id))
            .unwrap();
        let (_, f) = self.raw.next_frame().await.expect("the response");
        assert!(matches!(read_response(&f).unwrap().outcome, Outcome::Ok(_)));
        let d: &[u8; DESCRIPTOR_LEN] = f[f.len() - DESCRIPTOR_LEN..].try_into().unwrap();
        let lent = Descriptor {
            addr: u64::from_be_bytes(d[0..8].try_into().unwrap()),
            rkey: u32::from_be_bytes(d[8..12].try_into().unwrap()),
            len: u32::from_be_bytes(d[12..16].try_into().unwrap()),
        };
        (lent, body)
    }

    /// Reads `d` with RDMA Read; the status and what landed.
    async fn read(&mut self, d: Descriptor) -> (WcStatus, Vec<u8>) {
        self.raw.read(d.addr, d.rkey, d.len).await
    }

    /// Tells the server it is done with call `id`'s response, and waits for the
    /// server's answer (so the server has released it).
    async fn done(&mut self, id: u32) {
        let slot = self.raw.free_slot().await;
        self.raw.ring.post(slot, 0, imm(Kind::Rdone, id)).unwrap();
        let (imm, _) = self.raw.next_frame().await.expect("the RDONE's answer");
        let kind = rpc_core::fuzzing::wire::parse_imm(imm).map(|(k, _)| k);
        assert_eq!(kind, Some(Kind::Cr), "RDONE is answered by CR");
    }
}

/// Whether the server's device (the default one, as the raw client's) lends
/// through memory windows.
fn windows(h: &Hostile) -> bool {
    let on = h.raw.dev.caps().mw_type2;
    if !on {
        eprintln!(
            "rendezvous_windows: device {} has no memory windows: asserting the region-rkey exposure",
            h.raw.dev.name()
        );
    }
    on
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_descriptor_of_its_own_connection_reads_nothing_once_done() {
    let (addr, stats, stop) = echo_server().await;
    let good = channel(addr).await;
    let mut h = Hostile::connect(addr).await;
    let mine = seeded(1, DATA);
    let (old, body) = h.call(1, mine).await;
    // While lent, the body reads (it is what the server encoded: the echo).
    let (st, bytes) = h.read(old).await;
    assert_eq!(st, WcStatus::Success);
    assert_eq!(bytes, body);
    h.done(1).await;

    // Another connection's response now fills the pool's regions (the same size:
    // the same region, reused).
    let secret = seeded(2, DATA);
    assert_eq!(echo(&good, 7, secret.clone()).await, secret);
    let (st, bytes) = h.read(old).await;
    if windows(&h) {
        assert_eq!(st, WcStatus::RemAccessErr, "an invalidated window was read");
        assert!(bytes.iter().all(|&b| b == 0), "bytes were read");
        // The Read broke the hostile client's own connection (its QP is in error),
        // as any bad rkey does; the server's side learns it at its next post there.
        assert_eq!(h.raw.qp.state(), rpc_transport::QpState::Err);
    } else {
        assert_eq!(st, WcStatus::Success);
        let theirs = prost::Message::encode_to_vec(&Echo {
            id: 7,
            data: secret,
        });
        assert_eq!(bytes, theirs, "the documented exposure: the reused region");
    }
    // Everyone else is served, large and small.
    let data = seeded(3, DATA);
    assert_eq!(echo(&good, 8, data.clone()).await, data);
    assert_eq!(echo(&good, 9, vec![1]).await, vec![1]);
    drop(h);
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats.get().in_use != 0 {
        assert!(Instant::now() < deadline, "regions not back: {stats:?}");
        tokio::task::yield_now().await;
    }
    drop(stop);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_learned_from_another_connection_reads_nothing() {
    let (addr, _stats, stop) = echo_server().await;
    let good = channel(addr).await;
    let mut victim = Hostile::connect(addr).await;
    let mut thief = Hostile::connect(addr).await;
    // The victim's response is lent (no RDONE yet): in flight on its connection.
    let (theirs, body) = victim.call(1, seeded(4, DATA)).await;
    let (st, bytes) = thief.read(theirs).await;
    if windows(&thief) {
        assert_eq!(st, WcStatus::RemAccessErr, "another QP's window was read");
        assert!(bytes.iter().all(|&b| b == 0), "bytes were read");
        assert_eq!(thief.raw.qp.state(), rpc_transport::QpState::Err);
    } else {
        assert_eq!(st, WcStatus::Success);
        assert_eq!(bytes, body, "the documented exposure: one PD for all");
    }
    // The victim still reads its own, and the server serves everyone else.
    let (st, bytes) = victim.read(theirs).await;
    assert_eq!(st, WcStatus::Success);
    assert_eq!(bytes, body);
    victim.done(1).await;
    let data = seeded(5, DATA);
    assert_eq!(echo(&good, 2, data.clone()).await, data);
    drop(stop);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_bodies_lent_at_once_on_one_connection_all_arrive_and_come_back() {
    // More responses lent at once than a connection may have window WRs
    // outstanding (16): binds wait for room as replies wait for slots.
    let (addr, stats, stop) = echo_server().await;
    let ch = channel(addr).await;
    let calls = (0..48u8).map(|k| {
        let ch = ch.clone();
        tokio::spawn(async move {
            let data = seeded(k, DATA + usize::from(k) * 1000);
            assert_eq!(
                echo(&ch, u64::from(k), data.clone()).await,
                data,
                "call {k}"
            );
        })
    });
    for c in calls.collect::<Vec<_>>() {
        c.await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats.get().in_use != 0 {
        assert!(Instant::now() < deadline, "regions not back: {stats:?}");
        tokio::task::yield_now().await;
    }
    drop(stop);
}
