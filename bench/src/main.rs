//! `rpc-bench`: rdma-rpc against tonic and a raw TCP loop on the same unary echo
//! workloads, in the same run, with every figure also a ratio against the baselines.
//!
//! * `rpc-bench [--quick] [--json FILE] [--plot FILE] ...`: the benchmark (servers in
//!   child processes, clients here).
//! * `rpc-bench serve --system S`: one system's server (what the run starts).
//! * `rpc-bench call --system S --addr A --calls N`: a fixed number of calls (what
//!   `scripts/callgrind-per-call` measures).
//!
//! Feature `rdma`: rdma-rpc's verbs provider (`--provider verbs`).
#![forbid(unsafe_code)]

mod call;
mod child;
mod cli;
mod floor;
mod link;
mod plot;
mod progress;
mod proto;
mod provider;
mod report;
mod run;
mod runner;
mod rusage;
mod server;
mod stats;
mod system;
mod systems;
mod workload;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Role};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs only when asked for: they would interleave with the progress bar.
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let result = match cli.role {
        None => run::run(cli.run).await,
        Some(Role::Serve(args)) => server::serve(args).await,
        Some(Role::Call(args)) => call::call(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpc-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
