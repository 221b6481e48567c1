//! A server's own settings and layers, end to end over the soft provider on RC
//! connections and UD sessions: `Server::timeout`, `Server::layer` (a layer of the
//! test's own and an interceptor layer), `concurrency_limit_per_connection`,
//! `add_optional_service`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rpc_core::client::{Grpc, OutgoingCall};
use rpc_core::metadata::AsciiMetadataValue;
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::service::InterceptorLayer;
use rpc_core::transport::{Channel, Router, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};
use tests::{path, sleep_was_aborted, Echo, EchoService};
use tokio::sync::{oneshot, watch};
use tower::{Service, ServiceExt};

/// Serves `router` on an ephemeral port of 127.0.0.1 until the sender is dropped.
async fn serve<L>(router: Router<L>, scheme: &str) -> (Channel, SocketAddr, oneshot::Sender<()>)
where
    L: tower::Layer<rpc_core::service::Routes> + Send + 'static,
    L::Service: rpc_core::server::CallService,
{
    let (addr, stop) = tests::serve_router(router).await;
    let ch = Channel::connect(format!("{scheme}://{addr}"))
        .await
        .expect("connects");
    (ch, addr, stop)
}

async fn unary(ch: &Channel, req: Request<Echo>, method: &str) -> Result<Response<Echo>, Status> {
    Grpc::new(ch.clone()).unary(req, path(method)).await
}

fn echo(id: u64) -> Request<Echo> {
    Request::new(Echo { id, data: vec![] })
}

// ---- Server::timeout ----

async fn the_servers_timeout_ends_a_slow_handler(scheme: &str, slow: u64) {
    let builder = Server::builder().timeout(Duration::from_millis(200));
    let (ch, _, _stop) = serve(builder.add_service(EchoService), scheme).await;
    assert_eq!(
        unary(&ch, echo(7), "Echo").await.unwrap().into_inner().id,
        7
    );

    // The handler sleeps `slow` ms; the client allows a minute; the server's cap ends it.
    let mut req = echo(slow);
    req.set_timeout(Duration::from_secs(60));
    let t0 = Instant::now();
    let e = unary(&ch, req, "Sleep").await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(sleep_was_aborted(slow), "the slow handler was stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rc_the_servers_timeout_ends_a_slow_handler_deadline_exceeded() {
    the_servers_timeout_ends_a_slow_handler("rdma", 20_201).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ud_the_servers_timeout_ends_a_slow_handler_deadline_exceeded() {
    the_servers_timeout_ends_a_slow_handler("rdma+ud", 20_202).await;
}

// ---- Server::layer ----

/// The test's own middleware: counts every call it sees, and tells the handler so
/// through the `seen-by-layer` metadata key.
#[derive(Clone)]
struct Counted<S> {
    inner: S,
    seen: Arc<AtomicU32>,
}

impl<S: Service<ServerCall>> Service<ServerCall> for Counted<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: ServerCall) -> S::Future {
        self.seen.fetch_add(1, Ordering::Relaxed);
        call.metadata_mut()
            .insert("seen-by-layer", AsciiMetadataValue::from_static("yes"));
        self.inner.call(call)
    }
}

/// An interceptor: calls without `x-api-key` are `UNAUTHENTICATED`.
fn require_key(req: Request<()>) -> Result<Request<()>, Status> {
    match req.metadata().get("x-api-key") {
        Some(_) => Ok(req),
        None => Err(Status::unauthenticated("no api key")),
    }
}

fn with_key(mut req: Request<Echo>) -> Request<Echo> {
    req.metadata_mut()
        .insert("x-api-key", AsciiMetadataValue::from_static("k"));
    req
}

async fn layers_see_every_call(scheme: &str) {
    let seen = Arc::new(AtomicU32::new(0));
    let counter = seen.clone();
    let builder = Server::builder()
        .layer(tower::layer::layer_fn(move |inner| Counted {
            inner,
            seen: counter.clone(),
        }))
        .layer(InterceptorLayer::new(require_key));
    let (ch, _, _stop) = serve(builder.add_service(EchoService), scheme).await;

    assert_eq!(
        unary(&ch, with_key(echo(1)), "Echo")
            .await
            .unwrap()
            .into_inner()
            .id,
        1
    );
    // What the layer did to the call reaches the handler (`Meta` echoes metadata).
    let r = unary(&ch, with_key(echo(2)), "Meta").await.unwrap();
    assert_eq!(
        r.metadata().get("seen-by-layer").unwrap().to_str().unwrap(),
        "yes"
    );
    // Refused by the interceptor layer, after the counting layer saw it.
    let e = unary(&ch, echo(3), "Echo").await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::Unauthenticated, "no api key")
    );
    // A service the server does not have goes through the layers too.
    let e = unary(&ch, with_key(echo(4)), "Other").await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    assert_eq!(seen.load(Ordering::Relaxed), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rc_layers_see_every_call() {
    layers_see_every_call("rdma").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ud_layers_see_every_call() {
    layers_see_every_call("rdma+ud").await;
}

// ---- concurrency_limit_per_connection ----

/// What the concurrency test observes.
#[derive(Debug, Default, Clone, Copy)]
struct Gauge {
    running: u32,
    max_running: u32,
    finished: u32,
    /// The test lets the first call finish.
    released: bool,
    /// Calls finished when the second call's handler started.
    finished_before_second: Option<u32>,
}

/// `test.Echo`'s `Echo`: the call with id 1 runs until the test releases it, or
/// until another call runs beside it (without a limit the only way out, and it shows
/// as `max_running == 2`). Calls with ids from 10 on (from other connections) answer
/// at once and are not counted.
#[derive(Clone)]
struct Gate(Arc<watch::Sender<Gauge>>);

impl NamedService for Gate {
    const NAME: &'static str = "test.Echo";
}

impl Service<ServerCall> for Gate {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            let m = call.into_request::<Echo>()?.into_inner();
            if m.id >= 10 {
                return Ok(Response::new(ReplyBody::message(m)));
            }
            state.send_modify(|g| {
                g.running += 1;
                g.max_running = g.max_running.max(g.running);
                if m.id == 2 {
                    g.finished_before_second = Some(g.finished);
                }
            });
            if m.id == 1 {
                let mut rx = state.subscribe();
                let _ = rx.wait_for(|g| g.released || g.max_running > 1).await;
            }
            state.send_modify(|g| {
                g.running -= 1;
                g.finished += 1;
            });
            Ok(Response::new(ReplyBody::message(m)))
        })
    }
}

/// Starts a call on `ch` (it is sent, or queued in order, when this returns) and
/// returns the future of its reply.
async fn start(ch: &Channel, path: &'static str, id: u64) -> BoxFuture<Echo> {
    let mut ch = ch.clone();
    ServiceExt::<OutgoingCall<Echo>>::ready(&mut ch)
        .await
        .expect("room to send");
    let reply = ch.call(OutgoingCall::new(path, echo(id)));
    Box::pin(async move { Ok(reply.await?.decode::<Echo>()?.into_inner()) })
}

async fn a_limit_of_one_runs_a_connections_calls_one_at_a_time(scheme: &str) {
    let state = Arc::new(watch::channel(Gauge::default()).0);
    let builder = Server::builder().concurrency_limit_per_connection(1);
    let (ch, addr, _stop) = serve(builder.add_service(Gate(state.clone())), scheme).await;
    // A bound on a failure (a handler left waiting), not a synchronisation.
    let bound = Duration::from_secs(30);

    let first = start(&ch, path("Echo"), 1).await;
    let mut rx = state.subscribe();
    tokio::time::timeout(bound, rx.wait_for(|g| g.running == 1))
        .await
        .expect("the first handler starts")
        .unwrap();
    let second = start(&ch, path("Echo"), 2).await;
    // A malformed call sent after the second is answered at once, with no handler
    // and no permit: its answer means the server has read the second call (a
    // connection's frames arrive and are dispatched in order) and started it, or
    // made it wait.
    let e = start(&ch, "/malformed", 3).await.await.unwrap_err();
    assert_eq!(e.code(), Code::Internal, "{e:?}");
    // Another connection is not held back by this one's running call.
    let other = Channel::connect(format!("{scheme}://{addr}"))
        .await
        .expect("connects");
    let r = tokio::time::timeout(bound, unary(&other, echo(10), "Echo")).await;
    assert_eq!(r.expect("not held back").unwrap().into_inner().id, 10);
    state.send_modify(|g| g.released = true);

    let (a, b) = tokio::time::timeout(bound, async { (first.await, second.await) })
        .await
        .expect("both calls end");
    assert_eq!(a.unwrap().id, 1);
    assert_eq!(b.unwrap().id, 2);
    let seen = *state.borrow();
    assert_eq!(seen.max_running, 1, "{seen:?}");
    assert_eq!(
        seen.finished_before_second,
        Some(1),
        "the second call waited for the first: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rc_a_limit_of_one_runs_a_connections_calls_one_at_a_time() {
    a_limit_of_one_runs_a_connections_calls_one_at_a_time("rdma").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ud_a_limit_of_one_runs_a_connections_calls_one_at_a_time() {
    a_limit_of_one_runs_a_connections_calls_one_at_a_time("rdma+ud").await;
}

// ---- add_optional_service ----

struct Hello;

#[rpc_core::async_trait]
impl Greeter for Hello {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        Ok(Response::new(HelloReply {
            message: format!("hello {}", request.into_inner().name),
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_optional_service_is_unimplemented_and_a_present_one_serves() {
    let hi = || HelloRequest { name: "ann".into() };

    let router = Server::builder()
        .add_optional_service(None::<GreeterServer<Hello>>)
        .add_service(EchoService);
    let (ch, _, _stop) = serve(router, "rdma").await;
    let e = GreeterClient::new(ch.clone())
        .say_hello(hi())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    assert_eq!(
        unary(&ch, echo(1), "Echo").await.unwrap().into_inner().id,
        1
    );

    let router = Server::builder()
        .add_service(EchoService)
        .add_optional_service(Some(GreeterServer::new(Hello)));
    let (ch, _, _stop) = serve(router, "rdma").await;
    let r = GreeterClient::new(ch).say_hello(hi()).await.unwrap();
    assert_eq!(r.into_inner().message, "hello ann");
}
