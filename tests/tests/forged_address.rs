//! A hello that names an RDMA address on another host than the one it comes from
//! is refused before the server acts on it: on the soft provider, connecting a QP
//! dials the address its peer names, so a stranger could otherwise point the server
//! at any host and port. Everything here stays on 127.0.0.1: the forger connects
//! from 127.0.0.2 and names a trap listening on 127.0.0.1, which must never be
//! dialled.

use std::net::{SocketAddr, SocketAddrV4};

use rpc_core::client::Grpc;
use rpc_core::fuzzing::handshake::{Answer, ClientHello, RcAsk, Reject, UdAsk};
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;
use rpc_transport::msg::handshake;
use rpc_transport::{Gid, QpEndpoint};
use tests::{path, serve_echo, Echo};
use tokio::net::TcpSocket;

/// Sends `hello` from 127.0.0.2 naming `named` as the QP's address; the answer.
async fn forge(server: SocketAddr, named: SocketAddrV4, hello: Vec<u8>) -> Answer {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from(([127, 0, 0, 2], 0)))
        .expect("bind 127.0.0.2 (Linux routes all of 127/8 to loopback)");
    let mut tcp = socket.connect(server).await.unwrap();
    let endpoint = QpEndpoint {
        lid: 0,
        qpn: 77,
        psn: 7,
        gid: Gid::soft(named),
    };
    handshake::send(&mut tcp, &endpoint, &hello).await.unwrap();
    let reply = handshake::recv(&mut tcp).await.unwrap();
    Answer::decode(&reply.payload).unwrap()
}

async fn echo_once(addr: SocketAddr) {
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let r = Grpc::new(ch)
        .unary::<Echo, Echo>(
            Request::new(Echo {
                id: 5,
                data: vec![],
            }),
            path("Echo"),
        )
        .await
        .unwrap();
    assert_eq!(r.into_inner().id, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hellos_naming_another_hosts_address_are_refused_and_never_dialled() {
    tests::init_tracing();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, task) = serve_echo(Server::builder(), async {
        let _ = stopped.await;
    })
    .await;
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    trap.set_nonblocking(true).unwrap();
    let SocketAddr::V4(named) = trap.local_addr().unwrap() else {
        unreachable!("bound to an IPv4 address")
    };
    let rc = ClientHello::new(RcAsk {
        credits: 257,
        slot_size: 8192,
        max_message: 1 << 20,
    });
    let ud = ClientHello::new(UdAsk {
        window: 8,
        datagram: 4096,
        max_message: 1 << 20,
        qkey: 0x1111,
    });
    for (what, hello) in [("RC", rc.encode()), ("UD", ud.encode())] {
        match forge(addr, named, hello).await {
            Answer::Reject(r) => assert_eq!(r, Reject::ForeignAddress, "{what}"),
            other => panic!("a forged {what} hello was granted: {other:?}"),
        }
    }
    // The refusal came before any QP was connected: the trap was never dialled.
    let accepted = trap.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the server dialled the forged address: {accepted:?}"
    );
    // A hello from 127.0.0.1 naming 127.0.0.1 is a client's own: still served.
    echo_once(addr).await;
    let _ = stop.send(());
    task.await.unwrap();
}

#[test]
fn the_refusal_reads_clearly_on_the_client() {
    let hello = ClientHello::new(RcAsk {
        credits: 257,
        slot_size: 8192,
        max_message: 1 << 20,
    });
    let e = rpc_core::fuzzing::handshake::check_rc(&hello, &Reject::ForeignAddress.encode())
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "server refused the connection: this client's RDMA address is not the address it \
         connected from (soft provider)"
    );
}
