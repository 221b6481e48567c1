//! The key-value client: `kv-client [--addr rdma://127.0.0.1:50052] get|put|delete|scan ...`.

use clap::{Parser, Subcommand};
use examples::kv::key_value_client::KeyValueClient;
use examples::kv::{DeleteRequest, GetRequest, PutRequest, ScanRequest};

#[derive(Parser)]
#[command(about = "Calls kv.KeyValue over RDMA")]
struct Args {
    /// Server address.
    #[arg(long, default_value = "rdma://127.0.0.1:50052")]
    addr: String,
    #[command(subcommand)]
    op: Op,
}

#[derive(Subcommand)]
enum Op {
    /// Prints the value of KEY.
    Get { key: String },
    /// Stores VALUE under KEY.
    Put { key: String, value: String },
    /// Removes KEY.
    Delete { key: String },
    /// Lists entries from --start (inclusive) to --end (exclusive).
    Scan {
        #[arg(long, default_value = "")]
        start: String,
        #[arg(long, default_value = "")]
        end: String,
        #[arg(long, default_value_t = 0)]
        limit: u32,
    },
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::init_tracing();
    let args = Args::parse();
    let mut kv = KeyValueClient::connect(args.addr).await?;
    match args.op {
        Op::Get { key } => {
            let r = kv
                .get(GetRequest {
                    key: key.into_bytes(),
                })
                .await?
                .into_inner();
            match r.value {
                Some(v) => println!("{}", String::from_utf8_lossy(&v)),
                None => println!("(not found)"),
            }
        }
        Op::Put { key, value } => {
            let put = PutRequest {
                key: key.into_bytes(),
                value: value.into_bytes(),
            };
            let r = kv.put(put).await?.into_inner();
            match r.previous {
                Some(p) => println!("replaced {:?}", String::from_utf8_lossy(&p)),
                None => println!("stored"),
            }
        }
        Op::Delete { key } => {
            let r = kv
                .delete(DeleteRequest {
                    key: key.into_bytes(),
                })
                .await?
                .into_inner();
            println!("{}", if r.existed { "deleted" } else { "(not found)" });
        }
        Op::Scan { start, end, limit } => {
            let scan = ScanRequest {
                start_key: start.into_bytes(),
                end_key: end.into_bytes(),
                limit,
            };
            let r = kv.scan(scan).await?.into_inner();
            for e in r.entries {
                println!(
                    "{} = {}",
                    String::from_utf8_lossy(&e.key),
                    String::from_utf8_lossy(&e.value)
                );
            }
            if !r.next_key.is_empty() {
                println!("(more from {:?})", String::from_utf8_lossy(&r.next_key));
            }
        }
    }
    Ok(())
}
