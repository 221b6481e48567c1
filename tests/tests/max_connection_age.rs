//! `Server::max_connection_age`: a connection that reaches it is retired by GOAWAY.
//! The client's channel carries on without an error: its next calls go over a new
//! connection, and a call in flight on the old one is answered there.

use std::sync::Arc;
use std::time::Duration;

use rpc_core::client::Grpc;
use rpc_core::server::{BoxFuture, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Channel, Server};
use rpc_core::{Request, Response, Status};
use tests::{path, Echo, EchoFn};
use tokio::sync::{Notify, Semaphore};

/// Answers with the client's TCP port as the server saw it (which connection served
/// the call). `Sleep` first waits until the test opens the gate.
#[derive(Clone)]
struct Ports {
    entered: Arc<Notify>,
    gate: Arc<Semaphore>,
}

impl Ports {
    fn new() -> Ports {
        Ports {
            entered: Arc::new(Notify::new()),
            gate: Arc::new(Semaphore::new(0)),
        }
    }

    fn service(&self) -> EchoFn<impl FnMut(ServerCall) -> BoxFuture<ServerReply> + Clone> {
        let me = self.clone();
        EchoFn(move |call: ServerCall| -> BoxFuture<ServerReply> {
            let me = me.clone();
            Box::pin(async move {
                let held = call.method() == "Sleep";
                let req = call.into_request::<Echo>()?;
                let port = req.remote_addr().expect("a TCP peer").port();
                if held {
                    me.entered.notify_one();
                    me.gate.acquire().await.expect("never closed").forget();
                }
                Ok(Response::new(ReplyBody::message(Echo {
                    id: u64::from(port),
                    data: vec![],
                })))
            })
        })
    }
}

async fn port_of(ch: &Channel, method: &str) -> Result<u64, Status> {
    let r = Grpc::new(ch.clone())
        .unary::<Echo, Echo>(
            Request::new(Echo {
                id: 0,
                data: vec![],
            }),
            path(method),
        )
        .await?;
    Ok(r.into_inner().id)
}

/// Calls `Echo` every 10 ms (pacing only spares the CPU) until a connection other
/// than those in `seen` serves one; every call must succeed. Its port.
async fn until_a_new_connection(ch: &Channel, seen: &[u64]) -> u64 {
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    let next = async {
        loop {
            pace.tick().await;
            let port = port_of(ch, "Echo").await.expect("no call fails");
            if !seen.contains(&port) {
                return port;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .expect("a new connection within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aged_rc_connection_is_replaced_without_failing_a_call() {
    aged_connections_are_replaced("rdma").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aged_ud_session_is_replaced_without_failing_a_call() {
    aged_connections_are_replaced("rdma+ud").await;
}

async fn aged_connections_are_replaced(scheme: &str) {
    let svc = Ports::new();
    let router = Server::builder()
        .max_connection_age(Duration::from_millis(200))
        .add_service(svc.service());
    let (addr, _stop) = tests::serve_router(router).await;
    let ch = Channel::connect(format!("{scheme}://{addr}"))
        .await
        .unwrap();
    let first = port_of(&ch, "Echo").await.unwrap();

    // A call held in its handler on the first connection while it ages.
    let entered = svc.entered.notified();
    let held = tokio::spawn({
        let ch = ch.clone();
        async move { port_of(&ch, "Sleep").await }
    });
    entered.await;

    // Calls keep succeeding; once the connection has aged (200 ms ±10 %) they are
    // served over another one.
    let moved = until_a_new_connection(&ch, &[first]).await;
    assert_ne!(moved, first);

    // The call in flight on the old connection is answered there.
    svc.gate.add_permits(1);
    assert_eq!(held.await.unwrap().unwrap(), first);

    // And the new connection ages too: a third one follows.
    let third = until_a_new_connection(&ch, &[first, moved]).await;
    assert_ne!(third, moved);
    assert_ne!(third, first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_past_the_age_grace_ends_unavailable() {
    let svc = Ports::new();
    let router = Server::builder()
        .max_connection_age(Duration::from_millis(100))
        .max_connection_age_grace(Duration::from_millis(200))
        .add_service(svc.service());
    let (addr, _stop) = tests::serve_router(router).await;
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let first = port_of(&ch, "Echo").await.unwrap();
    let entered = svc.entered.notified();
    let held = tokio::spawn({
        let ch = ch.clone();
        async move { port_of(&ch, "Sleep").await }
    });
    entered.await;
    // The handler never returns: the grace period ends the old connection, and
    // with it the call, while new calls are served over the next connection.
    let e = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("the held call ends within 10 s")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), rpc_core::Code::Unavailable, "{e:?}");
    let now = port_of(&ch, "Echo").await.expect("the channel carries on");
    assert_ne!(now, first);
}
