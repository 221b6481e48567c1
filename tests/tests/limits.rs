//! tonic's `Endpoint::concurrency_limit` and `Endpoint::rate_limit`: shared by the
//! channel's clones, a call beyond the limit waits in `poll_ready` (it does not
//! fail) and goes once a call ends (concurrency).

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use rpc_core::client::OutgoingCall;
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::{Request, Response, Status};
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};
use tokio::sync::Semaphore;
use tower::{Service, ServiceExt};

/// Answers each call once the test lets it through the gate.
struct Gated(Arc<Semaphore>);

#[rpc_core::async_trait]
impl Greeter for Gated {
    async fn say_hello(&self, _: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        self.0.acquire().await.expect("gate open").forget();
        Ok(Response::new(HelloReply::default()))
    }
}

async fn serve(gate: Arc<Semaphore>) -> (Endpoint, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        Server::builder()
            .add_service(GreeterServer::new(Gated(gate)))
            .serve_with_listener(listener, async {
                let _ = stopped.await;
            }),
    );
    (
        Endpoint::from_shared(format!("rdma://{addr}")).unwrap(),
        stop,
    )
}

type Call = OutgoingCall<HelloRequest>;

fn call() -> Call {
    OutgoingCall::new(
        "/helloworld.Greeter/SayHello",
        Request::new(HelloRequest::default()),
    )
}

/// Whether `channel` is ready now (one poll).
async fn ready_now(channel: &mut Channel) -> bool {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Service::<Call>::poll_ready(channel, cx) {
            Poll::Ready(r) => {
                r.expect("poll_ready never fails");
                true
            }
            Poll::Pending => false,
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_beyond_the_concurrency_limit_waits_until_one_ends() {
    let gate = Arc::new(Semaphore::new(0));
    let (endpoint, _stop) = serve(gate.clone()).await;
    let channel = endpoint.concurrency_limit(2).connect().await.unwrap();

    let mut a = channel.clone();
    let first = ServiceExt::<Call>::ready(&mut a)
        .await
        .unwrap()
        .call(call());
    let mut b = channel.clone();
    let second = ServiceExt::<Call>::ready(&mut b)
        .await
        .unwrap()
        .call(call());
    // A third clone (the limit is the channel's, not a clone's) must wait.
    let mut c = channel.clone();
    assert!(
        !ready_now(&mut c).await,
        "two calls in flight: the third waits"
    );

    let mut third =
        Box::pin(async move { ServiceExt::<Call>::ready(&mut c).await?.call(call()).await });
    std::future::poll_fn(|cx| {
        assert!(third.as_mut().poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
    gate.add_permits(1);
    let done = tokio::select! {
        r = first => r,
        r = second => r,
    };
    done.expect("a call under the limit succeeds");
    gate.add_permits(2);
    third.await.expect("the waiting call went once one ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_holds_calls_beyond_it_for_the_window() {
    let gate = Arc::new(Semaphore::new(100));
    let (endpoint, _stop) = serve(gate).await;
    let channel = endpoint
        .clone()
        .rate_limit(2, Duration::from_secs(3600))
        .connect()
        .await
        .unwrap();
    for _ in 0..2 {
        let mut c = channel.clone();
        ServiceExt::<Call>::ready(&mut c)
            .await
            .unwrap()
            .call(call())
            .await
            .expect("within the rate");
    }
    let mut c = channel.clone();
    assert!(!ready_now(&mut c).await, "a third call this hour waits");
    // A channel without limits is not held by another channel's.
    let mut other = endpoint.connect().await.unwrap();
    ServiceExt::<Call>::ready(&mut other)
        .await
        .unwrap()
        .call(call())
        .await
        .expect("no limit");
}

/// Limits, balancing and wait-for-ready keep a channel shareable across tasks.
#[test]
fn a_channel_is_still_send_sync_and_clone() {
    fn assert_shareable<T: Send + Sync + Clone + 'static>() {}
    assert_shareable::<Channel>();
}
