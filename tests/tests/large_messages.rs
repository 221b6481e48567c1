//! Large unary messages by reference (RDMA Read "rendezvous", `docs/large-messages.md`):
//! every size around the slot and the threshold arrives byte for byte, small calls
//! interleave, the bounded pools serve more calls than they hold in order and give
//! every region back, a dead peer ends its calls `UNAVAILABLE` with the memory back,
//! and a hostile descriptor closes only the connection that sent it.
//!
//! Over verbs (the SoftRoCE VM, where the default device is rxe0 and TCG is slow) the
//! size sweep is kept to 1 MiB and 64 MiB and a handful of calls.

use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Endpoint, RendezvousStats, Server};
use rpc_core::{Code, Request};
use rpc_transport::ProviderKind;
use tests::{init_tracing, path, serve_echo, Echo};
use tokio::sync::oneshot;

const THRESHOLD: usize = 32 * 1024;
const MAX_MESSAGE: usize = 80 * 1024 * 1024;

/// Whether the default device is a verbs device (the VM): the lean variant.
fn on_verbs() -> bool {
    let dev = rpc_transport::msg::open_device(None).expect("default RDMA device");
    dev.provider() == ProviderKind::Verbs
}

async fn echo_server(builder: Server) -> (String, oneshot::Sender<()>) {
    init_tracing();
    let (tx, rx) = oneshot::channel::<()>();
    let (addr, _task) = serve_echo(builder, async move {
        let _ = rx.await;
    })
    .await;
    (format!("rdma://{addr}"), tx)
}

fn server(stats: &RendezvousStats) -> Server {
    Server::builder()
        .max_message_size(MAX_MESSAGE)
        .rendezvous_threshold(THRESHOLD)
        .rendezvous_stats(stats.clone())
}

async fn channel(uri: &str, stats: &RendezvousStats, pool: usize) -> Channel {
    Endpoint::from_shared(uri.to_string())
        .unwrap()
        .max_message_size(MAX_MESSAGE)
        .rendezvous_threshold(THRESHOLD)
        .rendezvous_pool_bytes(pool)
        .rendezvous_stats(stats.clone())
        .connect()
        .await
        .unwrap()
}

/// Bytes that differ at every offset and between calls.
fn pattern(id: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(id * 7) as u8)
        .collect()
}

async fn echo(ch: &Channel, id: u64, data: Vec<u8>) -> Result<Echo, rpc_core::Status> {
    let mut g = Grpc::new(ch.clone());
    let r = g
        .unary::<Echo, Echo>(Request::new(Echo { id, data }), path("Echo"))
        .await?;
    Ok(r.into_inner())
}

/// Data lengths whose encoded `Echo` (id and a bytes field) is `encoded` bytes long.
fn data_len_for(id: u64, encoded: usize) -> usize {
    let mut n = encoded;
    while n > 0
        && prost::Message::encoded_len(&Echo {
            id,
            data: vec![0; n],
        }) > encoded
    {
        n -= 1;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_size_round_trips_byte_for_byte_between_small_calls() {
    let (srv_stats, cli_stats) = (RendezvousStats::new(), RendezvousStats::new());
    let (uri, _stop) = echo_server(server(&srv_stats)).await;
    let ch = channel(&uri, &cli_stats, 128 << 20).await;
    let id = 1u64;
    let sizes: Vec<usize> = if on_verbs() {
        vec![1 << 20, 64 << 20]
    } else {
        let mut s = vec![0, 1, 100];
        // Around one 8 KiB slot (the frame less its head), and two.
        for base in [8 * 1024, 16 * 1024] {
            s.extend((base - 64..base + 64).step_by(7));
        }
        // Around the threshold, by encoded length: T-1, T (inline or fragments), T+1
        // (by reference).
        for enc in [THRESHOLD - 1, THRESHOLD, THRESHOLD + 1, THRESHOLD + 2] {
            s.push(data_len_for(id, enc));
        }
        s.extend([64 << 10, 1 << 20, (4 << 20) + 3, 65 << 20]);
        s
    };
    for (k, &len) in sizes.iter().enumerate() {
        let call_id = id + k as u64;
        let data = pattern(call_id, len);
        let (big, small) = tokio::join!(
            echo(&ch, call_id, data.clone()),
            echo(&ch, 1_000_000 + call_id, b"small".to_vec())
        );
        let big = big.unwrap_or_else(|e| panic!("{len} bytes: {e:?}"));
        assert_eq!(big.id, call_id);
        assert!(big.data == data, "{len} bytes came back changed");
        assert_eq!(small.unwrap().data, b"small");
    }
    // Bodies went by reference (regions were registered) and every region is back.
    let (c, s) = (cli_stats.get(), srv_stats.get());
    assert!(c.registrations > 0 && s.registrations > 0, "{c:?} {s:?}");
    assert_eq!((c.in_use, c.regions_in_use, c.waiting), (0, 0, 0), "{c:?}");
    assert_eq!((s.in_use, s.regions_in_use, s.waiting), (0, 0, 0), "{s:?}");
}
