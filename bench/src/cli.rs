//! Command line: the benchmark run (default), and the `serve` and `call` roles that
//! the run and `scripts/callgrind-per-call` start as separate processes.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::provider::ProviderArg;
use crate::system::System;
use crate::workload::Workload;

/// rdma-rpc against tonic (HTTP/2 on TCP and on a Unix socket) and a raw TCP loop
/// (sleeping and busy-polling): unary echo latency percentiles, calls/s, MB/s and CPU
/// per call, every figure also a ratio against the baselines measured in the same run.
#[derive(Debug, Parser)]
#[command(name = "rpc-bench", args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) role: Option<Role>,
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

/// What this process does.
#[derive(Debug, Subcommand)]
pub(crate) enum Role {
    /// Serve one system's echo on 127.0.0.1. Prints `listening ADDR`, then reads
    /// commands on stdin: `cpu` answers `cpu NANOS` (this process's CPU time),
    /// `quit` or the end of stdin stops it with a normal exit.
    Serve(ServeArgs),
    /// Make exactly `--calls` echo calls (after `--warmup-calls`) to a server, then exit.
    Call(CallArgs),
}

/// Options of a benchmark run.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Systems to run, comma separated: rdma-rpc, rdma-rpc-ud, tonic, tonic-uds (tonic
    /// on a Unix socket), tcp, tcp-spin (the TCP loop busy-polling).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rdma-rpc,tonic,tonic-uds,tcp,tcp-spin"
    )]
    pub(crate) systems: Vec<System>,
    /// Also run rdma-rpc's UD transport (`rdma-rpc-ud`, 32 B and 1 KiB only).
    #[arg(long)]
    pub(crate) ud: bool,
    /// Workloads to run, comma separated: unary, upload, server_stream,
    /// client_stream, bidi_pingpong. Streaming workloads run on rdma-rpc (RC) and
    /// tonic only; upload on every system but the TCP loops.
    #[arg(long, value_delimiter = ',', default_value = "unary")]
    pub(crate) workloads: Vec<Workload>,
    /// Message sizes of the streaming workloads (suffixes K and M).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "32,64K,1M")]
    pub(crate) stream_sizes: Vec<usize>,
    /// Concurrent streams of `server_stream` and `client_stream` (one connection);
    /// `bidi_pingpong` runs one.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub(crate) streams: Vec<usize>,
    /// Payload sizes of unary and upload calls in bytes (suffixes K and M are
    /// powers of 1024).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "32,1K,64K,4M")]
    pub(crate) sizes: Vec<usize>,
    /// Unary and upload calls in flight (closed loop).
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    pub(crate) concurrency: Vec<usize>,
    /// Measured time per cell (seconds, or with `ms`/`s`); default 3 s, 0.4 s with --quick.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,
    /// Unmeasured warm-up per cell; default 1 s, 0.15 s with --quick.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) warmup: Option<Duration>,
    /// Short cells: every size and concurrency in well under two minutes.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Write every figure as JSON to this file.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Write latency CDFs (one panel per workload, one curve per system) as SVG.
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
}

/// The RDMA provider rdma-rpc runs on.
#[derive(Debug, Args, Clone)]
pub(crate) struct ProviderArgs {
    /// `soft` (built in) or `verbs` (needs `--features rdma` and a device).
    #[arg(long, value_enum, default_value = "soft")]
    pub(crate) provider: ProviderArg,
    /// RDMA device name (default: soft0, or the first verbs device).
    #[arg(long)]
    pub(crate) device: Option<String>,
    /// How rdma-rpc's client and server reap completions: `default` (rdma-rpc's own:
    /// spin 50 µs after activity, then sleep), `event` (sleep under tokio until a
    /// completion), `busy` (spin: a core per poller), or `adaptive` (spin 200 µs).
    #[arg(long, value_enum, default_value = "default")]
    pub(crate) completion: CompletionArg,
    /// rdma-rpc's `initial_stream_window_size` on both ends, in bytes (default
    /// rdma-rpc's, 1 MiB; at least 1 MiB). tonic keeps its own (hyper's: 2 MiB on
    /// the client, 1 MiB on the server).
    #[arg(long)]
    pub(crate) stream_window: Option<u32>,
}

/// `--completion` on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CompletionArg {
    /// rdma-rpc's default `CompletionMode`.
    Default,
    /// Sleep on the completion channel.
    Event,
    /// Busy-poll.
    Busy,
    /// Spin for 200 µs after the last completion, then sleep.
    Adaptive,
}

/// Options of `serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The system to serve (rdma-rpc-ud is served by rdma-rpc's server).
    #[arg(long)]
    pub(crate) system: System,
    /// TCP port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub(crate) port: u16,
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
}

/// Options of `call`.
#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    /// The system to call.
    #[arg(long)]
    pub(crate) system: System,
    /// The server's HOST:PORT, as `serve` printed it.
    #[arg(long)]
    pub(crate) addr: std::net::SocketAddr,
    /// Payload size in bytes (suffixes K and M).
    #[arg(long, value_parser = parse_size, default_value = "32")]
    pub(crate) payload: usize,
    /// Measured calls.
    #[arg(long)]
    pub(crate) calls: u64,
    /// Calls in flight.
    #[arg(long, default_value_t = 1)]
    pub(crate) concurrency: usize,
    /// Calls made first and not counted.
    #[arg(long, default_value_t = 200)]
    pub(crate) warmup_calls: u64,
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
}

/// `32`, `1K`, `64k`, `4M` (K and M are 1024 and 1024²).
pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1024),
        Some('m' | 'M') => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .map(|n| n * mul)
        .map_err(|_| format!("{s:?} is not a size (e.g. 32, 1K, 4M)"))
}

/// `2`, `0.5`, `1.5s`, `300ms`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(ms) = s.strip_suffix("ms") {
        (ms, 1e-3)
    } else {
        (s.strip_suffix('s').unwrap_or(s), 1.0)
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Duration::from_secs_f64(v * scale)),
        _ => Err(format!("{s:?} is not a duration (e.g. 2, 0.5, 300ms)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("32"), Ok(32));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert!(parse_size("x").is_err());
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("-1").is_err());
    }
}
