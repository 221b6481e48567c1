//! What a hostile server can read of a client's lent request bodies
//! (`docs/large-messages.md`, "Exposure"), over a raw server peer. Where the
//! client's device has type-2 memory windows, each request body is lent through a
//! window bound to exactly its bytes on the connection's own QP and invalidated on
//! the request's answer: a descriptor replayed after that reads nothing
//! (`REM_ACCESS_ERR`) and the client's later calls go on a new connection. Without
//! windows (siw; the soft `iwarp_like` profile) the region's own rkey is lent, and
//! the exposure the page states is asserted instead: the old descriptor reads the
//! region again, now holding a later call's body. Either way a descriptor of
//! another connection reads nothing (each connection's regions are on its own PD),
//! and the pool's regions come back after calls end, fail, are cancelled, and when
//! the connection dies.

use rpc_core::client::Grpc;
use rpc_core::fuzzing::wire::{Descriptor, Kind};
use rpc_core::transport::{Channel, Endpoint, RendezvousStats};
use rpc_core::{Code, Request, Status};
use rpc_transport::WcStatus;
use std::time::{Duration, Instant};
use tests::raw_rc_server::{RawRcPeer, RawRcServer};
use tests::{init_tracing, path, seeded, Echo};
use tokio::task::JoinHandle;

const THRESHOLD: usize = 32 * 1024;
/// Each body: above the threshold, one 128 KiB pool region.
const DATA: usize = 100_000;

fn encoded(id: u64, data: Vec<u8>) -> Vec<u8> {
    prost::Message::encode_to_vec(&Echo { id, data })
}

/// A channel to the raw server whose lend pool `stats` watches, and the server's
/// side of its connection.
async fn connect(server: &RawRcServer, stats: &RendezvousStats) -> (Channel, RawRcPeer) {
    init_tracing();
    let ep = Endpoint::from_shared(format!("rdma://{}", server.addr()))
        .unwrap()
        .rendezvous_threshold(THRESHOLD)
        .rendezvous_stats(stats.clone());
    let (ch, peer) = tokio::join!(ep.connect(), server.accept());
    (ch.unwrap(), peer)
}

/// Starts an `Echo` call with `data`; the raw server answers it by hand.
fn call(ch: &Channel, id: u64, data: Vec<u8>) -> JoinHandle<Result<u64, Status>> {
    let mut g = Grpc::new(ch.clone());
    tokio::spawn(async move {
        let r = g.unary::<Echo, Echo>(Request::new(Echo { id, data }), path("Echo"));
        r.await.map(|r| r.into_inner().id)
    })
}

/// Reads the next request's lent body and answers it: its descriptor.
async fn serve_lent(peer: &mut RawRcPeer, id: u64, data: Vec<u8>) -> Descriptor {
    let (call, d) = peer.next_lent_request().await;
    let body = peer.read(d).await.expect("the body lent now reads");
    assert_eq!(body, encoded(id, data), "the request's body");
    peer.respond(call, &encoded(id, Vec::new())).await;
    d
}

/// A small call (no body lent), answered: its caller reaps what came before.
async fn small_call(ch: &Channel, peer: &mut RawRcPeer, id: u64) {
    let c = call(ch, id, vec![1]);
    let (kind, call_id, _) = peer.next_frame().await;
    assert_eq!(kind, Kind::Req);
    peer.respond(call_id, &encoded(id, Vec::new())).await;
    assert_eq!(c.await.unwrap().unwrap(), id);
}

async fn regions_back(stats: &RendezvousStats) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats.get().in_use != 0 {
        assert!(Instant::now() < deadline, "regions not back: {stats:?}");
        tokio::task::yield_now().await;
    }
}

/// Whether the client's device (the default one, as the raw server's) lends
/// through memory windows.
fn windows(peer: &RawRcPeer) -> bool {
    let on = peer.dev.caps().mw_type2;
    if !on {
        eprintln!(
            "client_lend_windows: device {} has no memory windows: asserting the region-rkey exposure",
            peer.dev.name()
        );
    }
    on
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_replaying_an_old_descriptor_reads_nothing_once_answered() {
    let server = RawRcServer::bind().await;
    let stats = RendezvousStats::new();
    let (ch, mut peer) = connect(&server, &stats).await;
    let first = call(&ch, 1, seeded(1, DATA));
    let old = serve_lent(&mut peer, 1, seeded(1, DATA)).await;
    assert_eq!(first.await.unwrap().unwrap(), 1);
    // Its caller reaps the first body's invalidation: the region is free again.
    small_call(&ch, &mut peer, 9).await;
    regions_back(&stats).await;

    // A later request of the same size: the same region, reused.
    let secret = seeded(2, DATA);
    let second = call(&ch, 2, secret.clone());
    let (id, now) = peer.next_lent_request().await;
    assert_eq!(now.addr, old.addr, "the region is reused");
    let replayed = peer.read(old).await;
    if windows(&peer) {
        assert_ne!(now.rkey, old.rkey, "a new window per body");
        assert_eq!(
            replayed,
            Err(WcStatus::RemAccessErr),
            "an invalidated window was read"
        );
        // The bad Read broke the connection (both QPs are in error): the call in
        // flight on it fails, its region comes back, and later calls go on a new
        // connection.
        let e = second.await.unwrap().unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
        regions_back(&stats).await;
        let third = call(&ch, 3, seeded(3, DATA));
        let mut peer = server.accept().await;
        serve_lent(&mut peer, 3, seeded(3, DATA)).await;
        assert_eq!(third.await.unwrap().unwrap(), 3);
    } else {
        assert_eq!(
            replayed,
            Ok(encoded(2, secret)),
            "the documented exposure: the reused region, through its own rkey"
        );
        peer.respond(id, &encoded(2, Vec::new())).await;
        assert_eq!(second.await.unwrap().unwrap(), 2);
    }
    drop(ch);
    regions_back(&stats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_of_another_connection_reads_nothing() {
    let server = RawRcServer::bind().await;
    let stats = RendezvousStats::new();
    let (victim, mut mine) = connect(&server, &stats).await;
    let (_other, mut thief) = connect(&server, &stats).await;
    // The victim's request is lent (not answered yet): in flight on its connection.
    let c = call(&victim, 1, seeded(4, DATA));
    let (id, theirs) = mine.next_lent_request().await;
    // On its own PD (and, with windows, bound to the victim's QP): nothing reads
    // through another connection, windows or not. The Read fails as the device fails
    // it: REM_ACCESS_ERR, except on siw (Linux 6.1), which completed it WR_FLUSH_ERR
    // in the VM suite; either way nothing was read.
    let stolen = thief.read(theirs).await;
    assert!(
        matches!(
            stolen,
            Err(WcStatus::RemAccessErr) | Err(WcStatus::WrFlushErr)
        ),
        "another connection's Read got {stolen:?}"
    );
    // The victim's own connection still reads it, and its call completes.
    let body = mine
        .read(theirs)
        .await
        .expect("its own connection reads it");
    assert_eq!(body, encoded(1, seeded(4, DATA)));
    mine.respond(id, &encoded(1, Vec::new())).await;
    assert_eq!(c.await.unwrap().unwrap(), 1);
    small_call(&victim, &mut mine, 2).await;
    regions_back(&stats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lent_regions_come_back_after_calls_end_fail_are_cancelled_and_the_connection_dies() {
    let server = RawRcServer::bind().await;
    let stats = RendezvousStats::new();
    let (ch, mut peer) = connect(&server, &stats).await;

    // Ends: answered OK.
    let c = call(&ch, 1, seeded(5, DATA));
    serve_lent(&mut peer, 1, seeded(5, DATA)).await;
    assert_eq!(c.await.unwrap().unwrap(), 1);
    small_call(&ch, &mut peer, 2).await;
    regions_back(&stats).await;

    // Fails: answered with an error after the server read the body.
    let c = call(&ch, 3, seeded(6, DATA));
    let (id, d) = peer.next_lent_request().await;
    peer.read(d).await.expect("the body lent now reads");
    peer.respond_status(id, &Status::internal("refused")).await;
    assert_eq!(c.await.unwrap().unwrap_err().code(), Code::Internal);
    small_call(&ch, &mut peer, 4).await;
    regions_back(&stats).await;

    // Cancelled: the caller goes away; the body stays lent (the server may still
    // read it) until the request's answer.
    let c = call(&ch, 5, seeded(7, DATA));
    let (id, d) = peer.next_lent_request().await;
    c.abort();
    let (kind, cancelled, _) = peer.next_frame().await;
    assert_eq!((kind, cancelled), (Kind::Cancel, id));
    peer.credit_return(id).await;
    let body = peer.read(d).await.expect("lent until the request's answer");
    assert_eq!(body, encoded(5, seeded(7, DATA)));
    peer.respond_status(id, &Status::cancelled("cancelled"))
        .await;
    small_call(&ch, &mut peer, 6).await;
    regions_back(&stats).await;

    // The connection dies with a body lent.
    let c = call(&ch, 7, seeded(8, DATA));
    peer.next_lent_request().await;
    assert!(stats.get().in_use > 0, "lent while the call is in flight");
    drop(peer);
    let e = c.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    regions_back(&stats).await;
}
