//! Generated clients calling generated servers end to end over the in-process
//! loopback transport: encode, route, run the trait method, encode, decode.

use std::time::Duration;

use codegen_tests::a::b::c::item::{self, origin::Source, Origin};
use codegen_tests::a::b::c::store_client::StoreClient;
use codegen_tests::a::b::c::store_server::{Store, StoreServer};
use codegen_tests::a::b::c::{Item, PutItemRequest, PutItemResponse};
use codegen_tests::common::{Priority, Tag};
use codegen_tests::helloworld::greeter_client::GreeterClient;
use codegen_tests::helloworld::greeter_server::{Greeter, GreeterServer};
use codegen_tests::helloworld::{HelloReply, HelloRequest};
use codegen_tests::loopback::Loopback;
use codegen_tests::multi::{
    alpha_client::AlphaClient, alpha_server, beta_client::BetaClient, beta_server,
};
use codegen_tests::multi::{Ping, Pong};
use codegen_tests::nopackage::{plain_client::PlainClient, plain_server, Bare};
use rpc_core::{Code, Request, Response, Status};

struct MyGreeter;

#[rpc_core::async_trait]
impl Greeter for MyGreeter {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        // Echo what arrived besides the message, so the client can check it.
        let timeout = request.timeout().map(|t| t.as_millis()).unwrap_or(0);
        let trace = request
            .metadata()
            .get("x-trace")
            .and_then(|v| v.to_str().ok().map(str::to_owned))
            .unwrap_or_default();
        let message = format!(
            "Hello {}! ({trace}, {timeout} ms)",
            request.into_inner().name
        );
        Ok(Response::new(HelloReply { message }))
    }
}

#[tokio::test]
async fn a_unary_call_round_trips_with_metadata_and_timeout() {
    let transport = Loopback::new(GreeterServer::new(MyGreeter));
    let mut client = GreeterClient::new(transport.clone());

    let mut request = Request::new(HelloRequest { name: "Ada".into() });
    request
        .metadata_mut()
        .insert("x-trace", "t-1".parse().unwrap());
    request.set_timeout(Duration::from_millis(250));
    let reply = client.say_hello(request).await.expect("call succeeds");

    assert_eq!(reply.into_inner().message, "Hello Ada! (t-1, 250 ms)");
    assert_eq!(transport.paths(), ["/helloworld.Greeter/SayHello"]);
}

#[tokio::test]
async fn a_bare_message_is_accepted_as_a_request() {
    let mut client = GreeterClient::new(Loopback::new(GreeterServer::new(MyGreeter)));
    let reply = client
        .say_hello(HelloRequest { name: "Bo".into() })
        .await
        .unwrap();
    assert_eq!(reply.get_ref().message, "Hello Bo! (, 0 ms)");
}

/// Echoes items back: exercises nested messages and enums, oneof, map, imports from
/// another package, and well-known types (`Timestamp`, `Empty` → `()`).
struct MyStore;

#[rpc_core::async_trait]
impl Store for MyStore {
    async fn put_item(
        &self,
        request: Request<PutItemRequest>,
    ) -> Result<Response<PutItemResponse>, Status> {
        let item = request
            .into_inner()
            .item
            .ok_or_else(|| Status::invalid_argument("no item"))?;
        Ok(Response::new(PutItemResponse {
            stored_at: item.created_at,
        }))
    }

    async fn latest_tag(&self, _request: Request<()>) -> Result<Response<Tag>, Status> {
        Ok(Response::new(Tag {
            name: "latest".into(),
            priority: Priority::High.into(),
        }))
    }

    async fn now(&self, _request: Request<()>) -> Result<Response<prost_types::Timestamp>, Status> {
        Ok(Response::new(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 5,
        }))
    }
}

#[tokio::test]
async fn nested_packages_imports_oneofs_maps_and_well_known_types_round_trip() {
    let transport = Loopback::new(StoreServer::new(MyStore));
    let mut client = StoreClient::new(transport.clone());
    let created_at = prost_types::Timestamp {
        seconds: 42,
        nanos: 7,
    };
    let item = Item {
        id: "i-1".into(),
        origin: Some(Origin {
            region: "eu".into(),
            source: Source::Gps.into(),
        }),
        content: Some(item::Content::Number(-3)),
        tags: [(
            "k".to_owned(),
            Tag {
                name: "t".into(),
                priority: Priority::Low.into(),
            },
        )]
        .into(),
        created_at: Some(created_at),
    };

    let stored = client
        .put_item(PutItemRequest { item: Some(item) })
        .await
        .unwrap();
    assert_eq!(stored.into_inner().stored_at, Some(created_at));

    let tag = client.latest_tag(()).await.unwrap().into_inner();
    assert_eq!(tag.priority(), Priority::High);
    let now = client.now(()).await.unwrap().into_inner();
    assert_eq!((now.seconds, now.nanos), (1_700_000_000, 5));

    let status = client
        .put_item(PutItemRequest { item: None })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        transport.paths(),
        [
            "/a.b.c.Store/PutItem",
            "/a.b.c.Store/LatestTag",
            "/a.b.c.Store/Now",
            "/a.b.c.Store/PutItem"
        ]
    );
}

struct Named(&'static str);

#[rpc_core::async_trait]
impl alpha_server::Alpha for Named {
    async fn ping(&self, request: Request<Ping>) -> Result<Response<Pong>, Status> {
        let seq = request.into_inner().seq;
        Ok(Response::new(Pong {
            seq,
            from: format!("{}.ping", self.0),
        }))
    }
}

#[rpc_core::async_trait]
impl beta_server::Beta for Named {
    async fn ping(&self, request: Request<Ping>) -> Result<Response<Pong>, Status> {
        let seq = request.into_inner().seq;
        Ok(Response::new(Pong {
            seq,
            from: format!("{}.ping", self.0),
        }))
    }

    async fn pong(&self, request: Request<Ping>) -> Result<Response<Pong>, Status> {
        let seq = request.into_inner().seq;
        Ok(Response::new(Pong {
            seq,
            from: format!("{}.pong", self.0),
        }))
    }
}

#[tokio::test]
async fn two_services_of_one_file_are_separate_clients_and_servers() {
    let alpha = Loopback::new(alpha_server::AlphaServer::new(Named("alpha")));
    let beta = Loopback::new(beta_server::BetaServer::new(Named("beta")));
    let mut alpha_client = AlphaClient::new(alpha.clone());
    let mut beta_client = BetaClient::new(beta.clone());

    let a = alpha_client
        .ping(Ping { seq: 1 })
        .await
        .unwrap()
        .into_inner();
    let b = beta_client
        .pong(Ping { seq: 2 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((a.seq, a.from.as_str()), (1, "alpha.ping"));
    assert_eq!((b.seq, b.from.as_str()), (2, "beta.pong"));
    assert_eq!(alpha.paths(), ["/multi.Alpha/Ping"]);
    assert_eq!(beta.paths(), ["/multi.Beta/Pong"]);

    // A server only answers its own service's paths, even for a same-named method.
    let mut wrong = AlphaClient::new(Loopback::new(beta_server::BetaServer::new(Named("beta"))));
    let status = wrong.ping(Ping { seq: 3 }).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert_eq!(status.message(), "", "no message, as tonic's");
}

struct Doubler;

#[rpc_core::async_trait]
impl plain_server::Plain for Doubler {
    async fn echo(&self, request: Request<Bare>) -> Result<Response<Bare>, Status> {
        Ok(Response::new(Bare {
            n: request.into_inner().n * 2,
        }))
    }
}

#[tokio::test]
async fn a_file_without_package_has_unprefixed_paths() {
    let transport = Loopback::new(plain_server::PlainServer::new(Doubler));
    let mut client = PlainClient::new(transport.clone());
    assert_eq!(
        client.echo(Bare { n: 21 }).await.unwrap().into_inner().n,
        42
    );
    assert_eq!(transport.paths(), ["/Plain/Echo"]);
    assert_eq!(plain_server::SERVICE_NAME, "Plain");
}
