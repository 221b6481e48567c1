//! A generated server called as the transport calls it: `tower::Service<ServerCall>`
//! over an encoded frame.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use codegen_tests::helloworld::greeter_server::{Greeter, GreeterServer};
use codegen_tests::helloworld::{HelloReply, HelloRequest};
use codegen_tests::loopback::{encode_reply, server_call};
use prost::Message;
use rpc_core::metadata::AsciiMetadataValue;
use rpc_core::server::ReplyBody;
use rpc_core::{Code, MetadataMap, Request, Response, Status};
use tower::{Service, ServiceExt};

/// Greets by name, counts its calls, and answers the name "nobody" with NOT_FOUND.
#[derive(Default)]
struct CountingGreeter {
    calls: AtomicUsize,
}

#[rpc_core::async_trait]
impl Greeter for CountingGreeter {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let lang = request
            .metadata()
            .get("x-lang")
            .and_then(|v| v.to_str().ok().map(str::to_owned))
            .unwrap_or_default();
        let name = request.into_inner().name;
        if name == "nobody" {
            return Err(Status::not_found("nobody is not here"));
        }
        let mut response = Response::new(HelloReply {
            message: format!("Hello {name}!"),
        });
        response
            .metadata_mut()
            .insert("x-lang-seen", lang.parse::<AsciiMetadataValue>().unwrap());
        Ok(response)
    }
}

async fn dispatch(
    server: &mut GreeterServer<CountingGreeter>,
    path: &str,
    body: &[u8],
    metadata: MetadataMap,
) -> Result<(MetadataMap, Vec<u8>), Status> {
    let call = server_call(path, body, metadata).expect("well-formed frame");
    let reply = server.ready().await?.call(call).await?;
    let (metadata, body, _) = reply.into_parts();
    let ReplyBody::Message(message) = body else {
        panic!("a unary method answered with a stream");
    };
    Ok((metadata, encode_reply(&*message)))
}

#[tokio::test]
async fn a_known_method_runs_the_trait_method_and_returns_the_encoded_reply() {
    let greeter = Arc::new(CountingGreeter::default());
    let mut server = GreeterServer::from_arc(Arc::clone(&greeter));
    let mut metadata = MetadataMap::new();
    metadata.insert("x-lang", "en".parse().unwrap());
    let body = HelloRequest { name: "Ada".into() }.encode_to_vec();

    let (metadata, bytes) = dispatch(&mut server, "/helloworld.Greeter/SayHello", &body, metadata)
        .await
        .expect("call succeeds");

    let reply = HelloReply::decode(bytes.as_slice()).expect("reply decodes");
    assert_eq!(reply.message, "Hello Ada!");
    assert_eq!(metadata.get("x-lang-seen").unwrap().to_str().unwrap(), "en");
    assert_eq!(greeter.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_status_from_the_trait_method_is_the_call_outcome() {
    let mut server = GreeterServer::new(CountingGreeter::default());
    let body = HelloRequest {
        name: "nobody".into(),
    }
    .encode_to_vec();
    let status = dispatch(
        &mut server,
        "/helloworld.Greeter/SayHello",
        &body,
        MetadataMap::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(status.message(), "nobody is not here");
}

#[tokio::test]
async fn an_unknown_method_is_unimplemented_with_no_message_as_on_tonic() {
    let greeter = Arc::new(CountingGreeter::default());
    let mut server = GreeterServer::from_arc(Arc::clone(&greeter));
    let body = HelloRequest { name: "Ada".into() }.encode_to_vec();
    let status = dispatch(
        &mut server,
        "/helloworld.Greeter/SayGoodbye",
        &body,
        MetadataMap::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert_eq!(status.message(), "", "no message, as tonic's");
    assert_eq!(greeter.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_undecodable_body_is_invalid_argument_and_never_reaches_the_trait() {
    let greeter = Arc::new(CountingGreeter::default());
    let mut server = GreeterServer::from_arc(Arc::clone(&greeter));
    // Field 1 announced as a 127-byte string, with 2 bytes following.
    let body = [0x0a, 0x7f, b'h', b'i'];
    let status = dispatch(
        &mut server,
        "/helloworld.Greeter/SayHello",
        &body,
        MetadataMap::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("decode"), "{}", status.message());
    assert_eq!(greeter.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_empty_body_is_the_default_message() {
    // proto3: every field at its default encodes to nothing.
    let mut server = GreeterServer::new(CountingGreeter::default());
    let (_, bytes) = dispatch(
        &mut server,
        "/helloworld.Greeter/SayHello",
        &[],
        MetadataMap::new(),
    )
    .await
    .unwrap();
    assert_eq!(
        HelloReply::decode(bytes.as_slice()).unwrap().message,
        "Hello !"
    );
}

#[test]
fn the_server_is_cheap_to_clone_and_shares_the_implementation() {
    let greeter = Arc::new(CountingGreeter::default());
    let server = GreeterServer::from_arc(Arc::clone(&greeter));
    let _clone = server.clone();
    assert_eq!(Arc::strong_count(&greeter), 3);
    assert_eq!(format!("{server:?}"), "GreeterServer { .. }");
}

struct Nothing;

#[rpc_core::async_trait]
impl codegen_tests::multi::placeholder_server::Placeholder for Nothing {}

#[tokio::test]
async fn a_service_without_methods_answers_everything_unimplemented() {
    use codegen_tests::multi::placeholder_server::PlaceholderServer;
    let mut server = PlaceholderServer::new(Nothing);
    let call = server_call("/multi.Placeholder/Anything", &[], MetadataMap::new()).unwrap();
    // `ServerReply` is not `Debug` (`dyn EncodeMessage` is not), hence no `unwrap_err`.
    let status = server
        .ready()
        .await
        .unwrap()
        .call(call)
        .await
        .err()
        .unwrap();
    assert_eq!(status.code(), Code::Unimplemented);
    assert_eq!(status.message(), "", "no message, as tonic's");
}
