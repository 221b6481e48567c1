//! The command line, as clap reads it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// List, describe, call and load-test the services of an rdma-rpc server, as grpcurl
/// and ghz do for gRPC. Descriptors come from the server's reflection service
/// (`rpc-reflection`) unless `--proto` or `--protoset` is given.
///
/// Exit status: 0 on success; 64 + the gRPC status code when a call ends with an
/// error status (as grpcurl); 1 for any other error (bad input, unreachable server).
#[derive(Debug, Parser)]
#[command(name = "rdma-rpc", version)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// A subcommand.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The server's services, or one service's methods.
    List(ListArgs),
    /// A service, method, message or enum, in proto syntax.
    Describe(DescribeArgs),
    /// Calls a method with a request written as proto3 JSON, and prints the reply as
    /// proto3 JSON, one object per line.
    Call(CallArgs),
    /// Load-tests a method: calls at a concurrency (or an offered rate), then a
    /// latency summary and histogram.
    Bench(BenchArgs),
}

/// Where the server is and how to reach it.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// The server: `rdma://host:port` (RC) or `rdma+ud://host:port` (UD).
    pub(crate) addr: String,
    /// Time to wait for the connection.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub(crate) connect_timeout: Duration,
}

/// Where the descriptors come from.
#[derive(Debug, Args)]
pub(crate) struct SchemaArgs {
    /// A `.proto` file to parse (no protoc needed), instead of asking the server's
    /// reflection service. Repeatable.
    #[arg(long = "proto", value_name = "FILE")]
    pub(crate) protos: Vec<PathBuf>,
    /// A directory `--proto` files and their imports are found in. Repeatable;
    /// default: the directory of each `--proto` file.
    #[arg(long = "import-path", short = 'I', value_name = "DIR")]
    pub(crate) import_paths: Vec<PathBuf>,
    /// An encoded `FileDescriptorSet` (`protoc --descriptor_set_out`, or rpc-codegen's
    /// `file_descriptor_set_path`), instead of reflection. Repeatable.
    #[arg(long = "protoset", value_name = "FILE")]
    pub(crate) protosets: Vec<PathBuf>,
}

/// What a call carries besides its message.
#[derive(Debug, Args)]
pub(crate) struct CallOptions {
    /// Request metadata `key: value` (keys ending `-bin` take base64 values).
    /// Repeatable.
    #[arg(short = 'H', long = "header", value_name = "'KEY: VALUE'")]
    pub(crate) headers: Vec<String>,
    /// Deadline of each call (`500ms`, `2s`, `1m`; a bare number is seconds).
    #[arg(long, value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
}

/// `rdma-rpc list ADDR [SERVICE]`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// A service (`package.Service`) whose methods to list.
    pub(crate) service: Option<String>,
    #[command(flatten)]
    pub(crate) schema: SchemaArgs,
}

/// `rdma-rpc describe ADDR SYMBOL`.
#[derive(Debug, Args)]
pub(crate) struct DescribeArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// A fully qualified service, method (`pkg.Service/Method` or
    /// `pkg.Service.Method`), message or enum.
    pub(crate) symbol: String,
    #[command(flatten)]
    pub(crate) schema: SchemaArgs,
}

/// `rdma-rpc call ADDR METHOD [JSON]`.
#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// `package.Service/Method` (or `package.Service.Method`).
    pub(crate) method: String,
    /// The request as proto3 JSON; without it, standard input is read. A streaming
    /// method takes one JSON object per line (sent as each line is read).
    pub(crate) json: Option<String>,
    #[command(flatten)]
    pub(crate) options: CallOptions,
    #[command(flatten)]
    pub(crate) schema: SchemaArgs,
}

/// `rdma-rpc bench ADDR METHOD`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// `package.Service/Method` (or `package.Service.Method`).
    pub(crate) method: String,
    /// The request as proto3 JSON, a template: `{{.RequestNumber}}` is replaced by
    /// the call's number (0, 1, 2... over the whole run), `{{.WorkerID}}` by the
    /// caller's (0..c), `{{.TimestampUnix}}`, `{{.TimestampUnixMilli}}` and
    /// `{{.TimestampUnixNano}}` by the time the call is made, `{{.MethodName}}` and
    /// `{{.ServiceName}}` by the method's. Without a per-call placeholder the request
    /// is encoded once. For a client- or bidirectional-streaming method, a JSON array
    /// is the messages of each call.
    #[arg(short = 'd', long, default_value = "{}")]
    pub(crate) data: String,
    /// Calls in flight (closed loop), or the most in flight with `--rps`.
    #[arg(short = 'c', long, default_value_t = 50)]
    pub(crate) concurrency: usize,
    /// Calls to make (default 200, unless `--duration` is given).
    #[arg(short = 'n', long = "total")]
    pub(crate) total: Option<u64>,
    /// Time to make calls for (`10s`, `1m`); with `-n`, whichever ends first.
    #[arg(short = 'z', long, value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,
    /// Offered load in calls/s (open loop): call k is due at start + k/rps, and its
    /// latency counts from then, so a slow server is not hidden by calls that were
    /// never sent (no coordinated omission). Without it, each caller sends its next
    /// call when the last one ends.
    #[arg(long)]
    pub(crate) rps: Option<f64>,
    /// Connections the callers share (caller i uses connection i mod N).
    #[arg(long, default_value_t = 1)]
    pub(crate) connections: usize,
    /// Unmeasured calls made first, at the same concurrency.
    #[arg(long, default_value_t = 0)]
    pub(crate) warmup: u64,
    #[command(flatten)]
    pub(crate) options: CallOptions,
    /// Prints the summary as JSON instead of text.
    #[arg(long, conflicts_with = "csv")]
    pub(crate) json: bool,
    /// Prints every measured call as CSV (`call,start_us,latency_us,status`) instead
    /// of the text summary.
    #[arg(long)]
    pub(crate) csv: bool,
    /// Writes latency over time and the latency CDF to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
    /// No progress line (it is shown only when standard error is a terminal).
    #[arg(long)]
    pub(crate) no_progress: bool,
    #[command(flatten)]
    pub(crate) schema: SchemaArgs,
}

/// `1.5s`, `500ms`, `250us`, `2m`, or a bare number of seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 500ms, 2s, 1m)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "m" => value * 60.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use us, ms, s or m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{s:?}: {e}"))
}
