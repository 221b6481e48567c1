//! `max_decoding_message_size`/`max_encoding_message_size` on generated clients and
//! servers, end to end over the soft provider, with messages that fit one frame and
//! messages that are fragmented.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rpc_core::transport::{Endpoint, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};
use tokio::sync::oneshot;

/// Replies with the request's name as it came, counting its calls.
#[derive(Default)]
struct Mirror {
    calls: AtomicUsize,
}

#[rpc_core::async_trait]
impl Greeter for Mirror {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let message = request.into_inner().name;
        Ok(Response::new(HelloReply { message }))
    }
}

/// Serves `server` on 127.0.0.1 port 0 until the returned sender is dropped.
async fn serve(server: GreeterServer<Mirror>) -> (String, oneshot::Sender<()>) {
    let (addr, stop) = tests::serve_router(Server::builder().add_service(server)).await;
    (format!("rdma://{addr}"), stop)
}

fn named(len: usize) -> HelloRequest {
    HelloRequest {
        name: "n".repeat(len),
    }
}

/// Encoded length of a request or reply carrying `len` bytes of text.
fn encoded(len: usize) -> usize {
    prost::Message::encoded_len(&named(len))
}

// Both sizes: one that fits a frame, one fragmented (frames are 8 KiB by default).
const SIZES: [usize; 2] = [1000, 100_000];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_a_request_over_its_decoding_limit_without_running_the_handler() {
    for size in SIZES {
        let mirror = Arc::new(Mirror::default());
        let server =
            GreeterServer::from_arc(Arc::clone(&mirror)).max_decoding_message_size(encoded(size));
        let (uri, _stop) = serve(server).await;
        let mut client = GreeterClient::connect(uri).await.unwrap();

        let reply = client.say_hello(named(size)).await.unwrap();
        assert_eq!(reply.into_inner().message.len(), size);
        let status = client.say_hello(named(size + 1)).await.unwrap_err();
        assert_eq!(status.code(), Code::OutOfRange, "{size}: {status:?}");
        assert_eq!(
            status.message(),
            format!(
                "Error, decoded message length too large: found {} bytes, the limit is: {} bytes",
                encoded(size + 1),
                encoded(size)
            )
        );
        assert_eq!(mirror.calls.load(Ordering::SeqCst), 1, "{size}");
        // The connection is fine afterwards.
        client.say_hello(named(1)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_answers_out_of_range_for_a_reply_over_its_encoding_limit() {
    for size in SIZES {
        let server = GreeterServer::new(Mirror::default()).max_encoding_message_size(encoded(size));
        let (uri, _stop) = serve(server).await;
        let mut client = GreeterClient::connect(Endpoint::from_shared(uri).unwrap())
            .await
            .unwrap();

        client.say_hello(named(size)).await.unwrap();
        let status = client.say_hello(named(size + 1)).await.unwrap_err();
        assert_eq!(status.code(), Code::OutOfRange, "{size}: {status:?}");
        assert!(
            status
                .message()
                .starts_with("Error, encoded message length too large"),
            "{status:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_enforces_its_own_limits_both_ways() {
    for size in SIZES {
        let mirror = Arc::new(Mirror::default());
        let (uri, _stop) = serve(GreeterServer::from_arc(Arc::clone(&mirror))).await;
        let client = GreeterClient::connect(uri).await.unwrap();

        let mut sending = client.clone().max_encoding_message_size(encoded(size));
        sending.say_hello(named(size)).await.unwrap();
        let status = sending.say_hello(named(size + 1)).await.unwrap_err();
        assert_eq!(status.code(), Code::Internal, "{size}: {status:?}");
        assert_eq!(mirror.calls.load(Ordering::SeqCst), 1, "not sent: {size}");

        let mut receiving = client.max_decoding_message_size(encoded(size));
        receiving.say_hello(named(size)).await.unwrap();
        let status = receiving.say_hello(named(size + 1)).await.unwrap_err();
        assert_eq!(status.code(), Code::OutOfRange, "{size}: {status:?}");
        assert!(
            status
                .message()
                .starts_with("Error, decoded message length too large"),
            "{status:?}"
        );
        assert_eq!(
            mirror.calls.load(Ordering::SeqCst),
            3,
            "the server answered: {size}"
        );
    }
}
