//! Capacity by SRQ: RC connections take their credit windows out of the server's one
//! shared receive pool, so many connect at default settings; a connection out of
//! credit waits, never fails; a connection limit refuses by name; peers that never
//! prove their RDMA path hold only the minimal window; and no frame ever meets an
//! empty receive queue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rpc_core::client::Grpc;
use rpc_core::fuzzing::handshake::{Answer, ClientHello, RcAsk};
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::{Code, Request, Response, Status};
use rpc_transport::msg::handshake;
use rpc_transport::{QpCap, QpInitAttr, QpType};
use tests::{init_tracing, path, serve_echo, Echo};
use tokio::sync::{oneshot, Notify, Semaphore};

async fn echo_server(builder: Server) -> (std::net::SocketAddr, oneshot::Sender<()>) {
    init_tracing();
    let (tx, rx) = oneshot::channel::<()>();
    let (addr, _task) = serve_echo(builder, async move {
        let _ = rx.await;
    })
    .await;
    (addr, tx)
}

async fn echo(ch: &Channel, id: u64) -> Result<Echo, Status> {
    let mut g = Grpc::new(ch.clone());
    let data = id.to_be_bytes().to_vec();
    let r = g
        .unary::<Echo, Echo>(Request::new(Echo { id, data }), path("Echo"))
        .await?;
    Ok(r.into_inner())
}

/// RNR NAKs the process's soft device has sent so far (server and clients share it).
fn rnr_naks() -> u64 {
    tests::soft_rnr_naks().expect("the tests run on the soft provider")
}

/// Opens `n` RC channels at default settings; every one calls, all at once.
async fn connect_and_call(n: usize) {
    let (addr, _stop) = echo_server(Server::builder()).await;
    let mut channels = Vec::new();
    for i in 0..n {
        let ch = Channel::connect(format!("rdma://{addr}"))
            .await
            .unwrap_or_else(|e| panic!("connection {i}: {e:?}"));
        channels.push(ch);
    }
    let mut calls = Vec::new();
    for (i, ch) in channels.iter().enumerate() {
        let ch = ch.clone();
        calls.push(tokio::spawn(async move { echo(&ch, i as u64).await }));
    }
    for (i, c) in calls.into_iter().enumerate() {
        assert_eq!(c.await.unwrap().unwrap().id, i as u64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_rc_channels_connect_and_call_at_default_settings() {
    connect_and_call(200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_rc_channels_connect_and_call_at_default_settings() {
    connect_and_call(1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_connections_a_connect_fails_unavailable_naming_the_limit() {
    let (addr, _stop) = echo_server(Server::builder().max_connections(3)).await;
    let uri = format!("rdma://{addr}");
    let mut held = Vec::new();
    for i in 0..3 {
        let ch = Channel::connect(uri.clone()).await.unwrap();
        assert_eq!(echo(&ch, i).await.unwrap().id, i);
        held.push(ch);
    }
    let e = format!("{:?}", Channel::connect(uri.clone()).await.unwrap_err());
    assert!(
        e.contains("limit of 3 connections"),
        "the refusal names the limit: {e}"
    );
    // A call on a lazy channel says the same, as UNAVAILABLE.
    let lazy = Endpoint::from_shared(uri.clone()).unwrap().connect_lazy();
    let s = echo(&lazy, 9).await.unwrap_err();
    assert_eq!(s.code(), Code::Unavailable);
    assert!(s.message().contains("limit of 3 connections"), "{s:?}");
    // One leaves: a new client fits again (once the server has seen it go).
    drop(held.pop());
    let mut again = None;
    for _ in 0..10_000 {
        if let Ok(ch) = Channel::connect(uri.clone()).await {
            again = Some(ch);
            break;
        }
        tokio::task::yield_now().await;
    }
    let again = again.expect("a place is free once a connection left");
    assert_eq!(echo(&again, 4).await.unwrap().id, 4);
}

/// `test.Echo` whose handlers each wait for a permit of `open` after counting
/// themselves in `entered`.
#[derive(Clone)]
struct Gate {
    entered: Arc<AtomicUsize>,
    changed: Arc<Notify>,
    open: Arc<Semaphore>,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            entered: Arc::new(AtomicUsize::new(0)),
            changed: Arc::new(Notify::new()),
            open: Arc::new(Semaphore::new(0)),
        }
    }

    /// Waits until `n` handlers have entered.
    async fn entered(&self, n: usize) {
        loop {
            let changed = self.changed.notified();
            if self.entered.load(Ordering::SeqCst) >= n {
                return;
            }
            changed.await;
        }
    }
}

impl NamedService for Gate {
    const NAME: &'static str = "test.Echo";
}

impl tower::Service<ServerCall> for Gate {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        let g = self.clone();
        Box::pin(async move {
            let m = call.into_request::<Echo>()?.into_inner();
            g.entered.fetch_add(1, Ordering::SeqCst);
            g.changed.notify_waiters();
            g.open.acquire().await.expect("never closed").forget();
            Ok(Response::new(ReplyBody::message(m)))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_pool_exhausted_calls_wait_for_credit_and_all_complete() {
    init_tracing();
    // A pool of 4 receives: the one connection allowed takes them all, a window
    // of 4 (3 calls in flight and the CANCEL credit), and nothing is left to grow.
    let gate = Gate::new();
    let router = Server::builder()
        .receive_pool_slots(4)
        .max_connections(1)
        .add_service(gate.clone());
    let (addr, _stop) = tests::serve_router(router).await;
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let calls: Vec<_> = (0..8u64)
        .map(|id| {
            let ch = ch.clone();
            tokio::spawn(async move { (id, echo(&ch, id).await) })
        })
        .collect();
    // Three calls reach their handlers; the other five wait for a credit that the
    // exhausted pool cannot give (their WANT is answered with none).
    gate.entered(3).await;
    let mut probe = ch.clone();
    let ready = tokio::time::timeout(
        Duration::from_millis(300),
        tower::ServiceExt::<rpc_core::client::OutgoingCall<Echo>>::ready(&mut probe),
    )
    .await;
    assert!(ready.is_err(), "no credit: poll_ready stays pending");
    drop(probe);
    assert!(
        calls.iter().all(|c| !c.is_finished()),
        "waiting is not failing"
    );
    assert_eq!(gate.entered.load(Ordering::SeqCst), 3);
    // As handlers finish, each answer returns its credit to the next waiting call.
    gate.open.add_permits(8);
    for c in calls {
        let (id, r) = c.await.unwrap();
        assert_eq!(r.unwrap().id, id);
    }
    assert_eq!(gate.entered.load(Ordering::SeqCst), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_is_served_while_twenty_forged_hellos_are_held_open() {
    // A pool so small that 20 fixed shares (the old grant) could never fit it:
    // forged peers that never prove their RDMA path hold the minimal window only.
    let (addr, _stop) = echo_server(Server::builder().receive_pool_slots(64)).await;
    let dev = rpc_transport::msg::open_device(None).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let mut forged = Vec::new();
    for i in 0..20 {
        let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
        init.cap = QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        // A real endpoint, so that the server connects its side; the forger then
        // never sends a frame on it.
        let qp = pd.create_qp(&init).unwrap();
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let hello = ClientHello::new(RcAsk {
            credits: 257,
            slot_size: 8192,
            max_message: 1 << 20,
        })
        .with_device(dev.caps());
        handshake::send(&mut tcp, &qp.endpoint(7).unwrap(), &hello.encode())
            .await
            .unwrap();
        let reply = handshake::recv(&mut tcp).await.unwrap();
        match Answer::decode(&reply.payload).unwrap() {
            Answer::Rc(g) => assert_eq!(g.credits, 2, "forged hello {i}: the minimal window"),
            other => panic!("forged hello {i} was not granted: {other:?}"),
        }
        forged.push((qp, tcp));
    }
    let ch = tokio::time::timeout(
        Duration::from_secs(2),
        Channel::connect(format!("rdma://{addr}")),
    )
    .await
    .expect("connected within 2 s")
    .unwrap();
    let calls = (0..32u64).map(|i| {
        let ch = ch.clone();
        tokio::spawn(async move { echo(&ch, i).await })
    });
    for (i, c) in calls.enumerate() {
        assert_eq!(c.await.unwrap().unwrap().id, i as u64);
    }
    drop(forged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_from_many_connections_meets_no_empty_receive_queue() {
    // Windows grow, shrink and move between 40 busy connections over a pool that
    // holds far fewer than their largest windows.
    let (addr, _stop) = echo_server(
        Server::builder()
            .receive_pool_slots(400)
            .max_connections(64),
    )
    .await;
    let before = rnr_naks();
    let mut tasks = Vec::new();
    for c in 0..40u64 {
        let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
        for w in 0..32u64 {
            let ch = ch.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..20u64 {
                    let id = (c << 32) | (w << 16) | i;
                    assert_eq!(echo(&ch, id).await.unwrap().id, id);
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        rnr_naks() - before,
        0,
        "no frame found an empty receive queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_uses_its_queue_pair_is_closed_and_an_idle_client_is_not() {
    let (addr, _stop) = echo_server(
        Server::builder()
            .handshake_timeout(Duration::from_millis(300))
            .max_connections(2),
    )
    .await;
    // A real client that connects and then says nothing for a while.
    let idle = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    // A forger that completes the handshake and never sends a frame.
    let dev = rpc_transport::msg::open_device(None).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&init).unwrap();
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let hello = ClientHello::new(RcAsk {
        credits: 257,
        slot_size: 8192,
        max_message: 1 << 20,
    })
    .with_device(dev.caps());
    handshake::send(&mut tcp, &qp.endpoint(7).unwrap(), &hello.encode())
        .await
        .unwrap();
    let reply = handshake::recv(&mut tcp).await.unwrap();
    assert!(matches!(Answer::decode(&reply.payload), Ok(Answer::Rc(_))));
    // The server closes it once the handshake timeout passed without a frame...
    let mut b = [0u8; 16];
    match tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut tcp, &mut b),
    )
    .await
    {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(n)) => panic!("the server sent {n} bytes to the forger"),
        Err(_) => panic!("a peer that never used its queue pair was still held after 5 s"),
    }
    // ...which frees its place under the limit of 2, while the idle client, silent
    // for longer than the timeout but proven at connect, keeps its connection.
    assert_eq!(echo(&idle, 1).await.unwrap().id, 1);
    let mut second = None;
    for _ in 0..10_000 {
        if let Ok(ch) = Channel::connect(format!("rdma://{addr}")).await {
            second = Some(ch);
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        echo(&second.expect("the forger's place is free"), 2)
            .await
            .unwrap()
            .id,
        2
    );
    drop(qp);
}
