//! tonic's `send_compressed`/`accept_compressed` on generated clients and servers:
//! a tonic program's compression settings build unchanged and change nothing, every
//! message arriving as it was sent.

use std::sync::Arc;

use codegen_tests::helloworld::greeter_client::GreeterClient;
use codegen_tests::helloworld::greeter_server::{Greeter, GreeterServer};
use codegen_tests::helloworld::{HelloReply, HelloRequest};
use codegen_tests::loopback::Loopback;
use rpc_core::codec::CompressionEncoding;
use rpc_core::{Request, Response, Status};

struct Hello;

#[rpc_core::async_trait]
impl Greeter for Hello {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        let message = format!("hello {}", request.into_inner().name);
        Ok(Response::new(HelloReply { message }))
    }
}

#[tokio::test]
async fn compression_settings_on_both_ends_leave_the_messages_as_they_are() {
    let server = GreeterServer::from_arc(Arc::new(Hello))
        .send_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd);
    let mut client = GreeterClient::new(Loopback::new(server))
        .send_compressed(CompressionEncoding::Zstd)
        .accept_compressed(CompressionEncoding::Gzip);
    let name = "x".repeat(3000);
    let reply = client
        .say_hello(HelloRequest { name: name.clone() })
        .await
        .unwrap();
    assert_eq!(reply.into_inner().message, format!("hello {name}"));
}
