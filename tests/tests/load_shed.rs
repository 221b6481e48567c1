//! `Server::load_shed` with a per-connection concurrency limit, as tonic's: a call
//! that finds the connection's handlers all busy is refused at once with
//! `RESOURCE_EXHAUSTED`, and the call already running is not disturbed.

use std::sync::Arc;

use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};
use tokio::sync::{Notify, Semaphore};

/// Answers once the test lets it; says when a call has started.
struct Gate {
    started: Arc<Notify>,
    open: Arc<Semaphore>,
}

#[rpc_core::async_trait]
impl Greeter for Gate {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        self.started.notify_one();
        self.open.acquire().await.unwrap().forget();
        let message = request.into_inner().name;
        Ok(Response::new(HelloReply { message }))
    }
}

fn hello(name: &str) -> HelloRequest {
    HelloRequest { name: name.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_beyond_the_connection_s_limit_is_shed_at_once() {
    let (started, open) = (Arc::new(Notify::new()), Arc::new(Semaphore::new(0)));
    let gate = Gate {
        started: started.clone(),
        open: open.clone(),
    };
    let server = Server::builder()
        .concurrency_limit_per_connection(1)
        .load_shed(true)
        .add_service(GreeterServer::new(gate));
    let (addr, _stop) = tests::serve_router(server).await;
    let client = GreeterClient::new(Channel::connect(format!("rdma://{addr}")).await.unwrap());

    let mut first = client.clone();
    let running = tokio::spawn(async move { first.say_hello(hello("first")).await });
    started.notified().await;
    let shed = client.clone().say_hello(hello("second")).await.unwrap_err();
    assert_eq!(shed.code(), Code::ResourceExhausted, "{shed:?}");
    assert_eq!(
        shed.message(),
        "Too many active requests for the connection"
    );

    open.add_permits(2);
    let reply = running.await.unwrap().unwrap().into_inner();
    assert_eq!(reply.message, "first", "the running call is not disturbed");
    let again = client.clone().say_hello(hello("third")).await.unwrap();
    assert_eq!(
        again.into_inner().message,
        "third",
        "served again once there is room"
    );
}
