//! Bad input from a raw peer: a client that speaks the handshake but then posts
//! garbage frames. The server must answer every frame (so the peer's credits stay
//! balanced), never crash, and keep serving everyone else. And handshakes across
//! protocol versions or with strangers fail with a message that says so.

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;
use rpc_transport::msg::handshake;
use rpc_transport::AccessFlags;
use tests::raw_rc::RawRcClient;
use tests::{path, serve_echo, Echo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Deterministic xorshift.
fn rng(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_frames_are_answered_and_crash_nothing() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, _t) = serve_echo(Server::builder(), async move {
        let _ = rx.await;
    })
    .await;

    // A raw client (`tests::raw_rc`) on the device the server uses.
    let mut raw = RawRcClient::connect(addr, 8, AccessFlags::empty()).await;

    let mut seed = 0x5eed_u64;
    for i in 0..300 {
        // One frame at a time: random kind and call id, random bytes, sometimes a
        // plausible request head with lying lengths.
        let s = raw.free_slot().await;
        let len = (rng(&mut seed) % 300) as usize;
        let buf = raw.ring.buf(&s);
        for b in &mut buf[..len] {
            *b = rng(&mut seed) as u8;
        }
        if i % 3 == 0 && len >= 16 {
            buf[12] = 0;
            buf[13] = (rng(&mut seed) % 40) as u8;
        }
        let imm = ((rng(&mut seed) % 16) as u32) << 28 | (i as u32 % 5);
        raw.ring.post(s, len, imm).unwrap();

        // Exactly one answer comes back for it.
        let answer = raw.next_frame().await;
        assert!(answer.is_ok(), "frame {i}: {answer:?}");
    }

    // The server still serves a well-behaved client.
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let r = Grpc::new(ch)
        .unary::<Echo, Echo>(
            Request::new(Echo {
                id: 9,
                data: vec![1],
            }),
            path("Echo"),
        )
        .await
        .unwrap();
    assert_eq!(r.into_inner().id, 9);
    drop(tx);
}

/// A client of protocol version 1 (its 50-byte hello straight on the TCP connection,
/// no exchange framing) is answered in its own format: it reads the server's
/// version and the refusal, and reports "peer speaks protocol version 2".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_client_is_told_the_servers_version() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, _t) = serve_echo(Server::builder(), async move {
        let _ = rx.await;
    })
    .await;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut v1 = [0u8; 50];
    v1[0..4].copy_from_slice(b"RRPC");
    v1[4..6].copy_from_slice(&1u16.to_be_bytes());
    tcp.write_all(&v1).await.unwrap();
    let mut answer = [0u8; 50];
    tcp.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer[0..4], b"RRPC");
    assert_eq!(u16::from_be_bytes([answer[4], answer[5]]), 2, "version");
    assert_eq!(u16::from_be_bytes([answer[6], answer[7]]), 1, "rejected");
    drop(tx);
}

/// A client that dials something other than an rdma-rpc server says so: one that
/// closes without answering (as a version-1 server does after reading its 50
/// bytes), and one that answers something else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_rdma_rpc_is_named() {
    let cases: [(&[u8], &str); 2] = [
        (b"", "closed the connection during the handshake"),
        (
            b"HTTP/1.1 400 Bad Request\r\n\r\n",
            "not an rdma-rpc peer (bad handshake magic)",
        ),
    ];
    for (answer, want) in cases {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            if answer.is_empty() {
                let mut b = [0u8; 50];
                s.read_exact(&mut b).await.unwrap();
            } else {
                // All of the hello, so closing sends no reset that could beat the answer.
                handshake::recv(&mut s).await.unwrap();
                s.write_all(answer).await.unwrap();
            }
        });
        let Err(e) = Channel::connect(format!("rdma://{addr}")).await else {
            panic!("connected to a stranger");
        };
        assert!(format!("{e:?}").contains(want), "{e:?}");
        server.await.unwrap();
    }
}
