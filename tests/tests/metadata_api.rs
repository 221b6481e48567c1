//! Metadata as tonic's, end to end over the soft provider: a handler reads every
//! value of a repeated key and a binary key and answers with metadata of its own; the
//! client compares what arrives with `==` against text, as a tonic program does.

use rpc_core::metadata::{
    AsciiMetadataKey, BinaryMetadataValue, KeyAndValueRef, KeyRef, MetadataMap, MetadataValue,
};
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};
use tokio::sync::oneshot;

/// Reads `x-tag` (repeated), `trace-bin` (binary) and `x-latin` (not visible ASCII)
/// and answers with what it saw; a name of `fail` ends the call with a status that
/// carries the same metadata.
struct Tagger;

#[rpc_core::async_trait]
impl Greeter for Tagger {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        let md = request.metadata();
        let tags: Vec<&str> = md
            .get_all("x-tag")
            .iter()
            .map(|v| v.to_str().expect("tags are visible ASCII"))
            .collect();
        let trace = md
            .get_bin("trace-bin")
            .expect("a trace")
            .to_bytes()
            .unwrap();
        let latin = md.get("x-latin").expect("a latin-1 value");
        assert!(latin.to_str().is_err(), "é is not visible ASCII");
        assert_eq!(latin, "caf\u{e9}");

        let mut out = MetadataMap::new();
        for tag in md.get_all("x-tag") {
            out.append("x-seen-tag", tag.clone());
        }
        out.insert("x-tag-count", MetadataValue::from(tags.len()));
        let message = tags.join("+");
        out.insert_bin("trace-bin", BinaryMetadataValue::from_bytes(&trace));
        // gRPC's own names are never sent, as tonic never sends them.
        out.insert("grpc-status", MetadataValue::from_static("0"));

        let name = request.into_inner().name;
        if name == "fail" {
            let mut status = Status::failed_precondition("asked to fail");
            *status.metadata_mut() = out;
            return Err(status);
        }
        let mut response = Response::new(HelloReply { message });
        *response.metadata_mut() = out;
        Ok(response)
    }
}

async fn serve() -> (String, oneshot::Sender<()>) {
    let router = Server::builder().add_service(GreeterServer::new(Tagger));
    let (addr, stop) = tests::serve_router(router).await;
    (format!("rdma://{addr}"), stop)
}

fn tagged(name: &str) -> Request<HelloRequest> {
    let mut req = Request::new(HelloRequest { name: name.into() });
    let md = req.metadata_mut();
    // A key built at run time, in the case a user typed it.
    let key = AsciiMetadataKey::from_bytes(b"X-Tag").unwrap();
    md.append(&key, "a".parse().unwrap());
    md.append(&key, MetadataValue::from_static("b"));
    md.append("x-tag", MetadataValue::try_from(String::from("c")).unwrap());
    md.insert_bin("trace-bin", MetadataValue::from_bytes(&[0, 159, 255]));
    md.insert("x-latin", "caf\u{e9}".parse().unwrap());
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_and_binary_metadata_travel_both_ways_as_tonics() {
    let (uri, _stop) = serve().await;
    let mut client = GreeterClient::new(Channel::connect(uri).await.unwrap());

    let r = client.say_hello(tagged("ada")).await.unwrap();
    let md = r.metadata();
    assert_eq!(
        md.get_all("x-seen-tag").iter().collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    assert_eq!(md.get("x-tag-count").unwrap(), "3");
    assert_eq!(md.get_bin("trace-bin").unwrap(), &[0u8, 159, 255][..]);
    assert!(!md.contains_key("grpc-status"), "{md:?}");
    let keys: Vec<&str> = md
        .keys()
        .map(|k| match k {
            KeyRef::Ascii(k) => k.as_str(),
            KeyRef::Binary(k) => k.as_str(),
        })
        .collect();
    assert_eq!(keys, ["x-seen-tag", "x-tag-count", "trace-bin"]);
    let binary = md
        .iter()
        .filter(|e| matches!(e, KeyAndValueRef::Binary(..)))
        .count();
    assert_eq!((md.len(), binary), (5, 1));
    assert_eq!(r.into_inner().message, "a+b+c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_carries_the_same_metadata() {
    let (uri, _stop) = serve().await;
    let mut client = GreeterClient::new(Channel::connect(uri).await.unwrap());

    let e = client.say_hello(tagged("fail")).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    let md = e.metadata();
    assert_eq!(
        md.get_all("x-seen-tag").iter().collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    assert_eq!(md.get("X-Tag-Count").unwrap(), "3");
    assert_eq!(
        md.get_bin("trace-bin").unwrap().to_bytes().unwrap(),
        vec![0u8, 159, 255]
    );
    assert!(md.get("grpc-status").is_none());
}
