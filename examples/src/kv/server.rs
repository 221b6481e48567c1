//! The key-value server: `kv-server [--addr 127.0.0.1:50052]`.

use clap::Parser;
use examples::kv::key_value_server::KeyValueServer;
use examples::kv_store::MemoryStore;
use rpc_core::transport::Server;

#[derive(Parser)]
#[command(about = "Serves kv.KeyValue (an in-memory store) over RDMA")]
struct Args {
    /// Address of the connection handshake.
    #[arg(long, default_value = "127.0.0.1:50052")]
    addr: std::net::SocketAddr,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::init_tracing();
    let args = Args::parse();
    println!("kv store listening on rdma://{}", args.addr);
    let reflection = rpc_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(examples::FILE_DESCRIPTOR_SET)
        .with_service_name("kv.KeyValue")
        .build_v1()?;
    Server::builder()
        .add_service(reflection)
        .add_service(KeyValueServer::new(MemoryStore::default()))
        .serve(args.addr)
        .await?;
    Ok(())
}
