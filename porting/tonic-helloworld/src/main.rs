//! tonic's helloworld (`examples/src/helloworld/{server,client}.rs`) as one program:
//! the server on 127.0.0.1 port 0, one call, the reply printed, exit 0.
//!
//! Written against `tonic::` paths exactly as tonic's example is; what differs:
//! * the address scheme: `rdma://` where tonic says `http://`;
//! * the server is served on an already bound listener (port 0, so the port is
//!   known before the client connects): `serve_with_listener`, where tonic would
//!   say `serve_with_incoming_shutdown(TcpListenerStream::new(listener), signal)`;
//! * tonic's server prints `request.remote_addr()`, which rpc-core does not have yet.

use tonic::{transport::Server, Request, Response, Status};

use hello_world::greeter_client::GreeterClient;
use hello_world::greeter_server::{Greeter, GreeterServer};
use hello_world::{HelloReply, HelloRequest};

pub mod hello_world {
    tonic::include_proto!("helloworld");
}

#[derive(Default)]
pub struct MyGreeter {}

#[tonic::async_trait]
impl Greeter for MyGreeter {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        let reply = hello_world::HelloReply {
            message: format!("Hello {}!", request.into_inner().name),
        };
        Ok(Response::new(reply))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Server, as tonic's server example.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let greeter = MyGreeter::default();

    println!("GreeterServer listening on {}", addr);

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        Server::builder()
            .add_service(GreeterServer::new(greeter))
            .serve_with_listener(listener, async {
                let _ = stopped.await;
            }),
    );

    // Client, as tonic's client example.
    let mut client = GreeterClient::connect(format!("rdma://{}", addr)).await?;

    let request = tonic::Request::new(HelloRequest {
        name: "Tonic".into(),
    });

    let response = client.say_hello(request).await?;

    println!("RESPONSE={:?}", response);

    let _ = stop.send(());
    server.await??;
    Ok(())
}
