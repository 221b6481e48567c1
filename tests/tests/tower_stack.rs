//! Tower middleware stacks added with `add_service`, end to end over the soft
//! provider: a timeout, a concurrency limit, and a layer of the user's own, with
//! their errors arriving at the client as the statuses `Status::from_error` names.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::metadata::AsciiMetadataValue;
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Channel, Router, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};
use tests::{path, sleep_was_aborted, Echo, EchoService};
use tokio::sync::{oneshot, watch};
use tower::{Service, ServiceBuilder};

/// Serves `router` on an ephemeral port of 127.0.0.1 until the sender is dropped.
async fn serve(router: Router) -> (String, oneshot::Sender<()>) {
    let (addr, stop) = tests::serve_router(router).await;
    (format!("rdma://{addr}"), stop)
}

async fn unary(ch: &Channel, req: Request<Echo>, method: &str) -> Result<Response<Echo>, Status> {
    Grpc::new(ch.clone()).unary(req, path(method)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_layer_answers_in_time_and_ends_a_slow_handler_deadline_exceeded() {
    let stack = ServiceBuilder::new()
        .timeout(Duration::from_millis(200))
        .service(EchoService);
    let (uri, _stop) = serve(Server::builder().add_service(stack)).await;
    let ch = Channel::connect(uri).await.unwrap();

    let r = unary(
        &ch,
        Request::new(Echo {
            id: 7,
            data: vec![1],
        }),
        "Echo",
    )
    .await;
    assert_eq!(
        r.unwrap().into_inner(),
        Echo {
            id: 7,
            data: vec![1]
        }
    );

    // The service's own status passes through the layer's boxed error unchanged.
    let mut req = Request::new(Echo::default());
    req.metadata_mut()
        .insert("fail", AsciiMetadataValue::from_static("yes"));
    let e = unary(&ch, req, "Meta").await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::PermissionDenied, "asked to fail")
    );
    assert!(e.metadata().get("fail").is_some(), "{e:?}");

    // Sleeps 10 s; the call carries no deadline, so only the layer can end it.
    let slow = 10_101;
    let t0 = Instant::now();
    let e = unary(
        &ch,
        Request::new(Echo {
            id: slow,
            data: vec![],
        }),
        "Sleep",
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(sleep_was_aborted(slow), "the slow handler was stopped");
}

/// What the concurrency test observes: handlers running now and at most, and calls
/// the limit held back (found their service not ready).
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    running: u32,
    max_running: u32,
    held: u32,
    finished: u32,
}

/// `test.Echo`'s `Echo` method, slow: the first call runs until the state says
/// another call has been held back by the limit, or has run beside it (without a
/// limit the only way out, and it shows as `max_running == 2`).
#[derive(Clone)]
struct Gauge(Arc<watch::Sender<Counts>>);

impl NamedService for Gauge {
    const NAME: &'static str = "test.Echo";
}

impl Service<ServerCall> for Gauge {
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
            let started = {
                let mut started = Counts::default();
                state.send_modify(|c| {
                    c.running += 1;
                    c.max_running = c.max_running.max(c.running);
                    started = *c;
                });
                started
            };
            // The first call waits for the second to be held back (or to run beside
            // it); the second runs once the first has finished.
            if started.finished == 0 {
                let mut rx = state.subscribe();
                let _ = rx.wait_for(|c| c.held > 0 || c.max_running > 1).await;
            }
            state.send_modify(|c| {
                c.running -= 1;
                c.finished += 1;
            });
            Ok(Response::new(ReplyBody::message(m)))
        })
    }
}

/// Outermost layer: counts calls whose inner service (the limit) was not ready.
#[derive(Clone)]
struct CountHeld<S> {
    inner: S,
    state: Arc<watch::Sender<Counts>>,
    counted: bool,
}

impl<S: NamedService> NamedService for CountHeld<S> {
    const NAME: &'static str = S::NAME;
}

impl<S: Service<ServerCall>> Service<ServerCall> for CountHeld<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        let r = self.inner.poll_ready(cx);
        if r.is_pending() && !self.counted {
            self.counted = true;
            self.state.send_modify(|c| c.held += 1);
        }
        r
    }

    fn call(&mut self, call: ServerCall) -> S::Future {
        self.inner.call(call)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_of_one_runs_calls_one_after_the_other() {
    let state = Arc::new(watch::channel(Counts::default()).0);
    let stack = ServiceBuilder::new()
        .layer_fn(|inner| CountHeld {
            inner,
            state: state.clone(),
            counted: false,
        })
        .concurrency_limit(1)
        .service(Gauge(state.clone()));
    let (uri, _stop) = serve(Server::builder().add_service(stack)).await;
    let ch = Channel::connect(uri).await.unwrap();

    let call = |id| {
        let ch = ch.clone();
        tokio::spawn(
            async move { unary(&ch, Request::new(Echo { id, data: vec![] }), "Echo").await },
        )
    };
    let (a, b) = (call(1), call(2));
    // A bound on a failure (a handler left waiting), not a synchronisation.
    let (a, b) = tokio::time::timeout(Duration::from_secs(30), async { (a.await, b.await) })
        .await
        .expect("both calls end");
    assert_eq!(a.unwrap().unwrap().into_inner().id, 1);
    assert_eq!(b.unwrap().unwrap().into_inner().id, 2);
    let seen = *state.borrow();
    assert_eq!(seen.max_running, 1, "{seen:?}");
    assert_eq!(
        seen.held, 1,
        "the second call waited for the first: {seen:?}"
    );
    assert_eq!(seen.finished, 2, "{seen:?}");
}

/// A greeter that greets.
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

/// The user's own error: not a `Status`.
#[derive(Debug)]
struct WrongKey(String);

impl fmt::Display for WrongKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "api key {:?} is not one of ours", self.0)
    }
}

impl Error for WrongKey {}

/// The user's own layer: a call without `x-api-key` is `UNAUTHENTICATED`; one with a
/// key other than `good` fails with [`WrongKey`].
#[derive(Clone)]
struct RequireKey<S>(S);

impl<S: NamedService> NamedService for RequireKey<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<ServerCall> for RequireKey<S>
where
    S: Service<ServerCall, Response = ServerReply>,
    S::Error: Into<Box<dyn Error + Send + Sync>>,
    S::Future: Send + 'static,
{
    type Response = ServerReply;
    type Error = Box<dyn Error + Send + Sync>;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<ServerReply, Self::Error>> + Send>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        let refused: Option<Self::Error> = match call.metadata().get("x-api-key") {
            None => Some(Status::unauthenticated("x-api-key is missing").into()),
            Some(k) if k != "good" => Some(WrongKey(k.to_str().unwrap_or("?").to_owned()).into()),
            Some(_) => None,
        };
        match refused {
            Some(e) => Box::pin(async move { Err(e) }),
            None => {
                let fut = self.0.call(call);
                Box::pin(async move { fut.await.map_err(Into::into) })
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_own_layer_refuses_calls_and_its_errors_arrive_as_statuses() {
    let stack = ServiceBuilder::new()
        .layer_fn(RequireKey)
        .timeout(Duration::from_secs(30))
        .service(GreeterServer::new(Hello));
    let (uri, _stop) = serve(Server::builder().add_service(stack)).await;
    let mut client = GreeterClient::new(Channel::connect(uri).await.unwrap());
    let hello = |key: Option<&'static str>| {
        let mut req = Request::new(HelloRequest {
            name: "rdma".into(),
        });
        if let Some(k) = key {
            req.metadata_mut()
                .insert("x-api-key", AsciiMetadataValue::from_static(k));
        }
        req
    };

    let r = client.say_hello(hello(Some("good"))).await.unwrap();
    assert_eq!(r.into_inner().message, "hello rdma");

    let e = client.say_hello(hello(None)).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::Unauthenticated, "x-api-key is missing")
    );

    let e = client.say_hello(hello(Some("bad"))).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::Unknown, "api key \"bad\" is not one of ours")
    );
}
