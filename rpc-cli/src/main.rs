//! `rdma-rpc`: list, describe, call and load-test the services of any rdma-rpc
//! server from the command line, as grpcurl and ghz do for gRPC.
#![forbid(unsafe_code)]

use clap::Parser;

mod args;
mod bench;
mod call;
mod connect;
mod describe;
mod dynamic;
mod fail;
mod headers;
mod json;
mod list;
mod schema;

use args::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    // Diagnostics on standard error, only when asked for (`RUST_LOG=rpc_core=debug`).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::List(args) => list::run(args).await,
            Command::Describe(args) => describe::run(args).await,
            Command::Call(args) => call::run(args).await,
            Command::Bench(args) => bench::run(args).await,
        }
    });
    // Whatever is still running (a stdin reader) is not waited for.
    runtime.shutdown_background();
    if let Err(fail) = result {
        eprintln!("{fail}");
        std::process::exit(fail.exit_code());
    }
}
