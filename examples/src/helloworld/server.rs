//! The greeter server: `greeter-server [--addr 127.0.0.1:50051]`.

use clap::Parser;
use examples::greeter::MyGreeter;
use examples::hello_world::greeter_server::GreeterServer;
use rpc_core::transport::Server;

#[derive(Parser)]
#[command(about = "Serves helloworld.Greeter over RDMA")]
struct Args {
    /// Address of the connection handshake (the RDMA device is the default one).
    #[arg(long, default_value = "127.0.0.1:50051")]
    addr: std::net::SocketAddr,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::init_tracing();
    let args = Args::parse();
    println!("greeter listening on rdma://{}", args.addr);
    let reflection = rpc_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(examples::FILE_DESCRIPTOR_SET)
        .with_service_name("helloworld.Greeter")
        .build_v1()?;
    Server::builder()
        .add_service(reflection)
        .add_service(GreeterServer::new(MyGreeter))
        .serve(args.addr)
        .await?;
    Ok(())
}
