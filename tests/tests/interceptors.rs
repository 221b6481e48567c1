//! Interceptors end to end over the soft provider, on RC connections and UD sessions:
//! a client interceptor adds a bearer token, a server interceptor checks it and hands
//! the handler a value through the request's extensions, and the handler sees the
//! client's address.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rpc_core::metadata::AsciiMetadataValue;
use rpc_core::service::InterceptedService;
use rpc_core::transport::{Channel, Router, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};
use tests::init_tracing;
use tokio::sync::oneshot;

const TOKEN: &str = "Bearer let-me-in";

/// Who the server's interceptor found the caller to be: its value in the request's
/// extensions.
#[derive(Debug, Clone)]
struct Caller(String);

/// Greets with what the interceptor and the connection say: the reply is
/// `caller|name|remote address|local address`.
#[derive(Default)]
struct Hello {
    runs: Arc<AtomicU32>,
}

#[rpc_core::async_trait]
impl Greeter for Hello {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        self.runs.fetch_add(1, Ordering::Relaxed);
        let caller = request
            .extensions()
            .get::<Caller>()
            .map_or("nobody".to_string(), |c| c.0.clone());
        let addr = |a: Option<SocketAddr>| a.map_or("none".to_string(), |a| a.to_string());
        let message = format!(
            "{caller}|{}|{}|{}",
            request.get_ref().name,
            addr(request.remote_addr()),
            addr(request.local_addr())
        );
        Ok(Response::new(HelloReply { message }))
    }
}

/// The server's interceptor: the token or `UNAUTHENTICATED`; a caller in the
/// extensions for the handler.
fn check_token(mut req: Request<()>) -> Result<Request<()>, Status> {
    match req.metadata().get("authorization") {
        Some(t) if t == TOKEN => {
            req.extensions_mut().insert(Caller("alice".into()));
            Ok(req)
        }
        _ => Err(Status::unauthenticated("no valid bearer token")),
    }
}

/// The client's interceptor.
fn add_token(mut req: Request<()>) -> Result<Request<()>, Status> {
    req.metadata_mut()
        .insert("authorization", AsciiMetadataValue::from_static(TOKEN));
    Ok(req)
}

/// Serves `router` on an ephemeral port of 127.0.0.1 until the sender is dropped.
async fn serve(router: Router) -> (SocketAddr, oneshot::Sender<()>) {
    tests::serve_router(router).await
}

fn hello(name: &str) -> HelloRequest {
    HelloRequest { name: name.into() }
}

async fn a_token_is_added_checked_and_the_handler_sees_caller_and_address(scheme: &str) {
    let greeter = Hello::default();
    let runs = greeter.runs.clone();
    let checks = Arc::new(AtomicU32::new(0));
    let counted = checks.clone();
    let check = move |req: Request<()>| {
        counted.fetch_add(1, Ordering::Relaxed);
        check_token(req)
    };
    let server = InterceptedService::new(GreeterServer::new(greeter), check);
    let (addr, _stop) = serve(Server::builder().add_service(server)).await;
    let channel = Channel::connect(format!("{scheme}://{addr}"))
        .await
        .unwrap();

    let mut client = GreeterClient::new(InterceptedService::new(channel.clone(), add_token));
    let reply = client.say_hello(hello("bob")).await.unwrap().into_inner();
    let parts: Vec<&str> = reply.message.split('|').collect();
    assert_eq!(parts[..2], ["alice", "bob"], "{reply:?}");
    let remote: SocketAddr = parts[2]
        .parse()
        .expect("the handler saw the client's address");
    assert_eq!(remote.ip(), addr.ip(), "{reply:?}");
    assert_ne!(remote.port(), addr.port(), "{reply:?}");
    assert_eq!(
        parts[3],
        addr.to_string(),
        "the server's own end: {reply:?}"
    );

    // Without the token: refused by the server's interceptor; the handler never ran.
    let e = GreeterClient::new(channel.clone())
        .say_hello(hello("mallory"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert_eq!(e.message(), "no valid bearer token");
    assert_eq!(runs.load(Ordering::Relaxed), 1);
    assert_eq!(checks.load(Ordering::Relaxed), 2);

    // Refused by the client's interceptor: nothing reaches the server.
    let refuse = |_: Request<()>| Err(Status::permission_denied("not from this client"));
    let e = GreeterClient::new(InterceptedService::new(channel.clone(), refuse))
        .say_hello(hello("eve"))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::PermissionDenied, "not from this client")
    );
    // The channel is still good (the refused call's reservation went back with its
    // client), and the server saw no call in between.
    let reply = client.say_hello(hello("carol")).await.unwrap().into_inner();
    assert!(reply.message.starts_with("alice|carol|"), "{reply:?}");
    assert_eq!(checks.load(Ordering::Relaxed), 3);
    assert_eq!(runs.load(Ordering::Relaxed), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rc_a_token_is_added_checked_and_the_handler_sees_caller_and_address() {
    a_token_is_added_checked_and_the_handler_sees_caller_and_address("rdma").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ud_a_token_is_added_checked_and_the_handler_sees_caller_and_address() {
    a_token_is_added_checked_and_the_handler_sees_caller_and_address("rdma+ud").await;
}

/// A client interceptor's timeout is the one the call is sent with: a deadline it
/// sets, shorter than the request's, is what the server's handler sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_interceptor_sets_the_calls_deadline() {
    use rpc_core::client::Grpc;
    use std::time::Duration;
    use tests::{path, serve_echo, Echo};

    init_tracing();
    let (tx, rx) = oneshot::channel::<()>();
    let (addr, _task) = serve_echo(Server::builder(), async move {
        let _ = rx.await;
    })
    .await;
    let channel = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let shorten = |mut req: Request<()>| {
        assert_eq!(req.timeout(), Some(Duration::from_secs(3600)));
        req.set_timeout(Duration::from_secs(60));
        Ok(req)
    };
    let mut grpc = Grpc::new(InterceptedService::new(channel, shorten));
    let mut req = Request::new(Echo::default());
    req.set_timeout(Duration::from_secs(3600));
    let seen_ms = grpc
        .unary::<Echo, Echo>(req, path("Deadline"))
        .await
        .unwrap()
        .into_inner()
        .id;
    assert!(
        (1..=60_000).contains(&seen_ms),
        "the handler saw {seen_ms} ms left"
    );
    drop(tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_with_interceptor_on_client_and_server_as_tonic() {
    let (addr, _stop) = serve(
        Server::builder().add_service(GreeterServer::with_interceptor(
            Hello::default(),
            check_token,
        )),
    )
    .await;
    let channel = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let mut client = GreeterClient::with_interceptor(channel.clone(), add_token);
    let reply = client.say_hello(hello("carol")).await.unwrap().into_inner();
    assert!(reply.message.starts_with("alice|carol|"), "{reply:?}");
    let e = GreeterClient::new(channel)
        .say_hello(hello("mallory"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
}
