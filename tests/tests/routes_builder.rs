//! Routes built apart from the server, as tonic's `Routes::builder()` and
//! `Server::add_routes`: the services added are served, one left out answers
//! `UNIMPLEMENTED`, and the server builder stays usable for a second router.

use rpc_core::service::Routes;
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};

struct Hi(&'static str);

#[rpc_core::async_trait]
impl Greeter for Hi {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        let message = format!("{} {}", self.0, request.into_inner().name);
        Ok(Response::new(HelloReply { message }))
    }
}

async fn greet(routes: Routes, server: &mut Server) -> Result<String, Status> {
    let (addr, _stop) = tests::serve_router(server.add_routes(routes)).await;
    let channel = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let mut client = GreeterClient::new(channel);
    let reply = client
        .say_hello(HelloRequest { name: "Ada".into() })
        .await?;
    Ok(reply.into_inner().message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_built_apart_are_served_and_the_server_builder_is_reused() {
    let mut server = Server::builder();
    let mut builder = Routes::builder();
    builder.add_service(GreeterServer::new(Hi("hello")));
    assert_eq!(
        greet(builder.routes(), &mut server).await.unwrap(),
        "hello Ada"
    );

    let replaced =
        Routes::new(GreeterServer::new(Hi("hello"))).add_service(GreeterServer::new(Hi("hi")));
    assert_eq!(
        greet(replaced, &mut server).await.unwrap(),
        "hi Ada",
        "same name: replaced"
    );

    let empty = Routes::builder().routes();
    let status = greet(empty, &mut server).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
}
