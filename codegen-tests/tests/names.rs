//! Generated names: modules, types, `SERVICE_NAME`, call paths, and the methods whose
//! proto names collide with Rust keywords or with the client's own helpers.

use codegen_tests::loopback::Loopback;
use codegen_tests::naming::session_client::SessionClient;
use codegen_tests::naming::session_server::{Session, SessionServer};
use codegen_tests::naming::{match_client::MatchClient, match_server, Ack, Self_};
use codegen_tests::{a, echo, helloworld, kv, multi, nopackage};
use rpc_core::codegen::NamedService;
use rpc_core::transport::Channel;
use rpc_core::{Request, Response, Status};

#[test]
fn service_names_are_package_dot_service() {
    assert_eq!(
        helloworld::greeter_server::SERVICE_NAME,
        "helloworld.Greeter"
    );
    assert_eq!(echo::echo_server::SERVICE_NAME, "echo.Echo");
    assert_eq!(kv::key_value_server::SERVICE_NAME, "kv.KeyValue");
    assert_eq!(a::b::c::store_server::SERVICE_NAME, "a.b.c.Store");
    assert_eq!(multi::alpha_server::SERVICE_NAME, "multi.Alpha");
    assert_eq!(multi::beta_server::SERVICE_NAME, "multi.Beta");
    assert_eq!(nopackage::plain_server::SERVICE_NAME, "Plain");
    assert_eq!(
        codegen_tests::naming::session_server::SERVICE_NAME,
        "naming.Session"
    );
    assert_eq!(match_server::SERVICE_NAME, "naming.Match");
}

/// A greeter that is never called: these tests are about types and names.
struct G;

#[rpc_core::async_trait]
impl helloworld::greeter_server::Greeter for G {
    async fn say_hello(
        &self,
        _: Request<helloworld::HelloRequest>,
    ) -> Result<Response<helloworld::HelloReply>, Status> {
        Err(Status::unimplemented("unused"))
    }
}

#[test]
fn named_service_is_what_the_router_routes_on() {
    fn name<S: NamedService>(_: &S) -> &'static str {
        S::NAME
    }
    let server = helloworld::greeter_server::GreeterServer::new(G);
    assert_eq!(name(&server), "helloworld.Greeter");
}

#[test]
fn generated_servers_are_what_the_server_builder_accepts() {
    let _router = rpc_core::transport::Server::builder()
        .add_service(helloworld::greeter_server::GreeterServer::new(G))
        .add_service(SessionServer::new(Recorder))
        .add_service(match_server::MatchServer::new(Recorder));
}

/// The shape a tonic user expects: `connect` on a `Channel` client taking what
/// tonic's takes (`&'static str`, `String`, `Endpoint`), `new` on any transport.
/// (Connecting needs a server, so this only has to compile.)
#[test]
fn clients_have_connect_and_new() {
    use helloworld::greeter_client::GreeterClient;
    let _str = GreeterClient::<Channel>::connect::<&'static str>;
    let _string = GreeterClient::<Channel>::connect::<String>;
    let _endpoint = GreeterClient::<Channel>::connect::<rpc_core::transport::Endpoint>;
    let _new = kv::key_value_client::KeyValueClient::<Channel>::new;
}

#[tokio::test]
async fn connect_refuses_a_bad_address_with_the_endpoint_s_error() {
    let err = helloworld::greeter_client::GreeterClient::connect("http://127.0.0.1:1")
        .await
        .unwrap_err();
    // As tonic's: the kind, with the endpoint's reason as its source (not wrapped again).
    assert_eq!(err.to_string(), "invalid URI");
    let why = std::error::Error::source(&err)
        .expect("a reason")
        .to_string();
    assert!(why.contains("is not an rdma://host:port"), "{why}");
}

fn assert_send<T: Send>(_: &T) {}

/// Calls can be `tokio::spawn`ed.
#[test]
fn client_calls_are_send() {
    let transport = Loopback::new(helloworld::greeter_server::GreeterServer::new(G));
    let mut client = helloworld::greeter_client::GreeterClient::new(transport);
    let call = client.say_hello(helloworld::HelloRequest::default());
    assert_send(&call);
}

/// Over the real transport too (compiled, not run: connecting needs a peer).
fn _channel_calls_are_send(mut client: echo::echo_client::EchoClient<Channel>) {
    let call = client.unary_echo(Request::new(echo::EchoRequest::default()));
    assert_send(&call);
}

/// The real transport satisfies the generated methods' bounds (compiled, not run).
async fn _calls_compile_over_a_channel(
    mut client: echo::echo_client::EchoClient<Channel>,
) -> Result<Response<echo::EchoResponse>, Status> {
    client.unary_echo(echo::EchoRequest::default()).await
}

/// Answers every method with its own proto name, so the test sees which ran.
struct Recorder;

fn ack(method: &str, request: Request<Self_>) -> Result<Response<Ack>, Status> {
    Ok(Response::new(Ack {
        method: format!("{method}:{}", request.into_inner().value),
    }))
}

#[rpc_core::async_trait]
impl Session for Recorder {
    async fn connect(&self, request: Request<Self_>) -> Result<Response<Ack>, Status> {
        ack("Connect", request)
    }
    async fn ready(&self, request: Request<Self_>) -> Result<Response<Ack>, Status> {
        ack("Ready", request)
    }
    async fn new(&self, request: Request<Self_>) -> Result<Response<Ack>, Status> {
        ack("New", request)
    }
    async fn clone(&self, request: Request<Self_>) -> Result<Response<Ack>, Status> {
        ack("Clone", request)
    }
    async fn call(&self, request: Request<Self_>) -> Result<Response<Ack>, Status> {
        ack("Call", request)
    }
    async fn r#type(&self, request: Request<Self_>) -> Result<Response<Ack>, Status> {
        ack("Type", request)
    }
    async fn self_(&self, request: Request<Self_>) -> Result<Response<Ack>, Status> {
        ack("Self", request)
    }
    async fn is_idle(&self, request: Request<Self_>) -> Result<Response<Ack>, Status> {
        ack("IsIdle", request)
    }
    async fn into_parts(&self, request: Request<Self_>) -> Result<Response<Ack>, Status> {
        ack("IntoParts", request)
    }
    async fn max_decoding_message_size(
        &self,
        request: Request<Self_>,
    ) -> Result<Response<Ack>, Status> {
        ack("MaxDecodingMessageSize", request)
    }
}

#[rpc_core::async_trait]
impl match_server::Match for Recorder {
    async fn r#async(&self, request: Request<Self_>) -> Result<Response<Ack>, Status> {
        ack("Async", request)
    }
}

#[tokio::test]
async fn methods_named_like_helpers_and_keywords_reach_the_right_trait_method() {
    let transport = Loopback::new(SessionServer::new(Recorder));
    let mut client = SessionClient::new(transport.clone());
    let m = |value: &str| Self_ {
        value: value.into(),
    };

    // `connect`, `new`, `clone` and `max_decoding_message_size` are the client's
    // own: those RPCs get a `_`.
    let mut got = vec![
        client.connect_(m("a")).await.unwrap().into_inner().method,
        client.new_(m("b")).await.unwrap().into_inner().method,
        client.clone_(m("c")).await.unwrap().into_inner().method,
        client.ready(m("d")).await.unwrap().into_inner().method,
        client.call(m("e")).await.unwrap().into_inner().method,
        client.r#type(m("f")).await.unwrap().into_inner().method,
        client.self_(m("g")).await.unwrap().into_inner().method,
        client.is_idle(m("i")).await.unwrap().into_inner().method,
        client.into_parts(m("j")).await.unwrap().into_inner().method,
        client
            .max_decoding_message_size_(m("l"))
            .await
            .unwrap()
            .into_inner()
            .method,
    ];
    // ... so `Clone::clone` still means cloning the client.
    let mut cloned = client.clone();
    got.push(cloned.connect_(m("h")).await.unwrap().into_inner().method);

    assert_eq!(
        got,
        [
            "Connect:a",
            "New:b",
            "Clone:c",
            "Ready:d",
            "Call:e",
            "Type:f",
            "Self:g",
            "IsIdle:i",
            "IntoParts:j",
            "MaxDecodingMessageSize:l",
            "Connect:h"
        ]
    );
    assert_eq!(
        transport.paths(),
        [
            "/naming.Session/Connect",
            "/naming.Session/New",
            "/naming.Session/Clone",
            "/naming.Session/Ready",
            "/naming.Session/Call",
            "/naming.Session/Type",
            "/naming.Session/Self",
            "/naming.Session/IsIdle",
            "/naming.Session/IntoParts",
            "/naming.Session/MaxDecodingMessageSize",
            "/naming.Session/Connect",
        ]
    );

    let mut keyword_client =
        MatchClient::new(Loopback::new(match_server::MatchServer::new(Recorder)));
    let ack = keyword_client.r#async(m("k")).await.unwrap().into_inner();
    assert_eq!(ack.method, "Async:k");
}
