//! The greeter client: `greeter-client [--addr rdma://127.0.0.1:50051] [--name NAME]`.

use clap::Parser;
use examples::hello_world::greeter_client::GreeterClient;
use examples::hello_world::HelloRequest;
use rpc_core::Request;

#[derive(Parser)]
#[command(about = "Calls helloworld.Greeter/SayHello over RDMA")]
struct Args {
    /// Server address.
    #[arg(long, default_value = "rdma://127.0.0.1:50051")]
    addr: String,
    /// Name to greet.
    #[arg(long, default_value = "rdma-rpc")]
    name: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::init_tracing();
    let args = Args::parse();
    let mut client = GreeterClient::connect(args.addr).await?;
    let response = client
        .say_hello(Request::new(HelloRequest { name: args.name }))
        .await?;
    println!("RESPONSE={:?}", response.into_inner().message);
    Ok(())
}
