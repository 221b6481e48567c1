//! What a tonic program reads from a request's head, end to end over the soft
//! provider: the `grpc-timeout` entry `set_timeout` makes (on the client and in the
//! handler's metadata, where a tonic handler finds its deadline), and the
//! `GrpcMethod` a client interceptor finds in the extensions.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpc_core::transport::{Channel, Server};
use rpc_core::{GrpcMethod, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};

/// Answers with the `grpc-timeout` entry its request carries, or `none`.
struct Deadline;

#[rpc_core::async_trait]
impl Greeter for Deadline {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        let message = request
            .metadata()
            .get("grpc-timeout")
            .map_or("none".to_string(), |v| v.to_str().unwrap().to_string());
        Ok(Response::new(HelloReply { message }))
    }
}

fn hello(timeout: Option<Duration>) -> Request<HelloRequest> {
    let mut req = Request::new(HelloRequest { name: "n".into() });
    if let Some(t) = timeout {
        req.set_timeout(t);
    }
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_timeout_is_grpc_timeout_metadata_on_both_ends_and_interceptors_see_the_method() {
    let router = Server::builder().add_service(GreeterServer::new(Deadline));
    let (addr, _stop) = tests::serve_router(router).await;
    let channel = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let mut client = GreeterClient::with_interceptor(channel, move |req: Request<()>| {
        let m = req.extensions().get::<GrpcMethod>().expect("the method");
        let timeout = req
            .metadata()
            .get("grpc-timeout")
            .map(|v| v.to_str().unwrap().to_string());
        record
            .lock()
            .unwrap()
            .push((format!("{}/{}", m.service(), m.method()), timeout));
        Ok(req)
    });

    let req = hello(Some(Duration::from_millis(100)));
    assert_eq!(
        req.metadata().get("grpc-timeout").unwrap(),
        "100000u",
        "tonic's value"
    );
    let reply = client.say_hello(req).await.unwrap().into_inner();
    assert_eq!(
        reply.message, "100000u",
        "the handler finds its deadline in its metadata"
    );
    let reply = client.say_hello(hello(None)).await.unwrap().into_inner();
    assert_eq!(reply.message, "none");

    let seen = seen.lock().unwrap().clone();
    let method = "helloworld.Greeter/SayHello".to_string();
    assert_eq!(
        seen,
        [(method.clone(), Some("100000u".into())), (method, None)]
    );
}
