//! The greeter of `helloworld.proto`.

use rpc_core::{Request, Response, Status};

use crate::hello_world::greeter_server::Greeter;
use crate::hello_world::{HelloReply, HelloRequest};

/// Greets by name; an empty name is `INVALID_ARGUMENT`.
#[derive(Debug, Default)]
pub struct MyGreeter;

#[rpc_core::async_trait]
impl Greeter for MyGreeter {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        let name = request.into_inner().name;
        if name.is_empty() {
            return Err(Status::invalid_argument("name must not be empty"));
        }
        Ok(Response::new(HelloReply {
            message: format!("Hello {name}!"),
        }))
    }
}
