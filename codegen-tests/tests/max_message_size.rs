//! Message size limits on generated clients and servers, as tonic's
//! `max_decoding_message_size`/`max_encoding_message_size`: over the in-process
//! loopback, so what was sent and what ran can be counted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use codegen_tests::helloworld::greeter_client::GreeterClient;
use codegen_tests::helloworld::greeter_server::{Greeter, GreeterServer};
use codegen_tests::helloworld::{HelloReply, HelloRequest};
use codegen_tests::loopback::Loopback;
use prost::Message;
use rpc_core::{Code, Request, Response, Status};

/// Replies with `name` repeated `times` (the request's name is `"<times>:<name>"`),
/// counting its calls.
#[derive(Default)]
struct Repeater {
    calls: AtomicUsize,
}

#[rpc_core::async_trait]
impl Greeter for Repeater {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let name = request.into_inner().name;
        let (times, word) = name.split_once(':').unwrap_or(("1", &name));
        let message = word.repeat(times.parse().unwrap_or(1));
        Ok(Response::new(HelloReply { message }))
    }
}

fn request(name: &str) -> HelloRequest {
    HelloRequest { name: name.into() }
}

/// Encoded length of a reply whose message is `n` bytes of text.
fn reply_len(n: usize) -> usize {
    HelloReply {
        message: "x".repeat(n),
    }
    .encoded_len()
}

fn setup() -> (Arc<Repeater>, Loopback<GreeterServer<Repeater>>) {
    let greeter = Arc::new(Repeater::default());
    (
        Arc::clone(&greeter),
        Loopback::new(GreeterServer::from_arc(greeter)),
    )
}

#[tokio::test]
async fn a_request_over_the_client_s_encoding_limit_fails_before_it_is_sent() {
    let (greeter, transport) = setup();
    let at_limit = request("1:abcdefgh");
    let limit = at_limit.encoded_len();
    let mut client = GreeterClient::new(transport.clone()).max_encoding_message_size(limit);

    let reply = client
        .say_hello(at_limit)
        .await
        .expect("at the limit is fine");
    assert_eq!(reply.into_inner().message, "abcdefgh");

    let status = client.say_hello(request("1:abcdefghi")).await.unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    assert_eq!(
        status.message(),
        format!(
            "Error, encoded message length too large: found {} bytes, the limit is: {limit} bytes",
            limit + 1
        )
    );
    assert_eq!(transport.paths().len(), 1, "the second call was never sent");
    assert_eq!(greeter.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_reply_over_the_client_s_decoding_limit_is_out_of_range() {
    let (greeter, transport) = setup();
    let limit = reply_len(100);
    let mut client = GreeterClient::new(transport).max_decoding_message_size(limit);

    let reply = client.say_hello(request("100:x")).await.unwrap();
    assert_eq!(reply.into_inner().message.len(), 100);

    let status = client.say_hello(request("101:x")).await.unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange);
    assert_eq!(
        status.message(),
        format!(
            "Error, decoded message length too large: found {} bytes, the limit is: {limit} bytes",
            reply_len(101)
        )
    );
    assert_eq!(
        greeter.calls.load(Ordering::SeqCst),
        2,
        "the server did answer"
    );
}

#[tokio::test]
async fn a_request_over_the_server_s_decoding_limit_never_reaches_the_handler() {
    let greeter = Arc::new(Repeater::default());
    let limit = request("1:abcdefgh").encoded_len();
    let server = GreeterServer::from_arc(Arc::clone(&greeter)).max_decoding_message_size(limit);
    let mut client = GreeterClient::new(Loopback::new(server));

    client.say_hello(request("1:abcdefgh")).await.unwrap();
    let status = client.say_hello(request("1:abcdefghi")).await.unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange);
    assert!(
        status
            .message()
            .starts_with("Error, decoded message length too large"),
        "{status:?}"
    );
    assert_eq!(
        greeter.calls.load(Ordering::SeqCst),
        1,
        "the handler ran once"
    );
}

#[tokio::test]
async fn a_reply_over_the_server_s_encoding_limit_is_out_of_range() {
    let server = GreeterServer::new(Repeater::default()).max_encoding_message_size(reply_len(100));
    let mut client = GreeterClient::new(Loopback::new(server));

    assert_eq!(
        client
            .say_hello(request("100:x"))
            .await
            .unwrap()
            .into_inner()
            .message
            .len(),
        100
    );
    let status = client.say_hello(request("101:x")).await.unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange);
    assert!(
        status
            .message()
            .starts_with("Error, encoded message length too large"),
        "{status:?}"
    );
}

#[tokio::test]
async fn without_limits_large_messages_pass() {
    let (_, transport) = setup();
    let mut client = GreeterClient::new(transport);
    // Over tonic's 4 MiB default: rdma-rpc keeps the transport's limit instead.
    let reply = client
        .say_hello(request(&format!("{}:x", 5 << 20)))
        .await
        .unwrap();
    assert_eq!(reply.into_inner().message.len(), 5 << 20);
}
