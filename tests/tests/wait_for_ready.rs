//! Wait-for-ready (gRPC's): a call made with `Request::set_wait_for_ready(true)` on a
//! channel whose server is not up waits for the connection until its deadline and
//! succeeds once the server starts; without it, the same call fails fast
//! `UNAVAILABLE`; with a deadline that passes first, `DEADLINE_EXCEEDED`.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};

struct Hello;

#[rpc_core::async_trait]
impl Greeter for Hello {
    async fn say_hello(&self, r: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        Ok(Response::new(HelloReply {
            message: format!("Hello {}!", r.into_inner().name),
        }))
    }
}

/// A port of 127.0.0.1 that nothing listens on (bound, then let go).
async fn free_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

fn request(wait: bool, timeout: Duration) -> Request<HelloRequest> {
    let mut r = Request::new(HelloRequest {
        name: "Tonic".into(),
    });
    r.set_timeout(timeout);
    r.set_wait_for_ready(wait);
    r
}

fn lazy_client(scheme: &str, port: u16) -> GreeterClient<Channel> {
    let endpoint = Endpoint::from_shared(format!("{scheme}://127.0.0.1:{port}")).unwrap();
    GreeterClient::new(endpoint.connect_lazy())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_ready_call_made_before_the_server_is_up_succeeds_once_it_starts() {
    waits_for_a_server_that_starts("rdma").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_ready_call_over_ud_waits_for_its_session_too() {
    waits_for_a_server_that_starts("rdma+ud").await;
}

async fn waits_for_a_server_that_starts(scheme: &str) {
    let port = free_port().await;
    let mut client = lazy_client(scheme, port);

    // Without wait-for-ready: UNAVAILABLE at once, well within its 5 s deadline.
    let err = client
        .say_hello(request(false, Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");

    // With it: issued now (polled until it waits), while no server is up...
    let mut waiting = client.clone();
    let mut call = Box::pin(async move {
        waiting
            .say_hello(request(true, Duration::from_secs(5)))
            .await
    });
    std::future::poll_fn(|cx| {
        assert!(call.as_mut().poll(cx).is_pending(), "no server: it waits");
        Poll::Ready(())
    })
    .await;

    // ...then the server starts, and the call goes through.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the port is still free");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        Server::builder()
            .add_service(GreeterServer::new(Hello))
            .serve_with_listener(listener, async {
                let _ = stopped.await;
            }),
    );
    let reply = call
        .await
        .expect("the waiting call succeeds once the server is up");
    assert_eq!(reply.into_inner().message, "Hello Tonic!");
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_ready_call_ends_deadline_exceeded_when_no_server_comes() {
    let mut client = lazy_client("rdma", free_port().await);
    let err = client
        .say_hello(request(true, Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(err.message().contains("wait-for-ready"), "{err:?}");
}
