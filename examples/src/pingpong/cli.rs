//! Command line.

use std::path::PathBuf;

use clap::Parser;

/// Raw verbs ping-pong against a TCP baseline, in the manner of rdma-core's
/// ibv_rc_pingpong.
///
/// With neither --listen nor --connect the tool starts itself a second time as the
/// server process and acts as the client; both sides busy-poll their completion
/// queue. It then runs the same exchange over a plain TCP socket (TCP_NODELAY,
/// blocking reads) between the same two processes.
///
/// Measured, for the RDMA provider and for TCP alike:
///   * rtt_p50_us / rtt_p99_us: round-trip time of one message of --size bytes sent by
///     the client and echoed back by the server, over --iters iterations after --warmup
///     unmeasured ones.
///   * mbps: one-way streaming bandwidth in Mbit/s (10^6 bit/s) of payload: the client
///     sends --iters messages of --size bytes, at most --window outstanding (RDMA; TCP
///     streams through the socket buffer), timed from the first send until the server
///     reports the last one received.
#[derive(Parser, Debug, Clone)]
#[command(name = "rdma-pingpong", verbatim_doc_comment)]
pub(crate) struct Args {
    /// Message size in bytes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) size: u32,
    /// Measured round trips (and messages in the bandwidth phase).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) iters: u32,
    /// Unmeasured round trips before the measured ones.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) warmup: u32,
    /// Outstanding sends in the RDMA bandwidth phase.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=512))]
    pub(crate) window: u32,
    /// Also write the figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// RDMA device: `soft0` (the software provider) or a verbs device such as `rxe0`.
    #[arg(long, default_value = "soft0")]
    pub(crate) device: String,
    /// Send inline when --size is at most the QP's max_inline_data.
    #[arg(long)]
    pub(crate) inline: bool,
    /// Run only the server side, waiting on PORT for one client (`--connect`).
    #[arg(long, value_name = "PORT", conflicts_with = "connect")]
    pub(crate) listen: Option<u16>,
    /// Run only the client side, against a server started with `--listen`.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) connect: Option<String>,
    /// Server process started by the client itself: listens on a free local port and
    /// prints it on the first line of stdout.
    #[arg(long, hide = true, conflicts_with = "connect")]
    pub(crate) serve: bool,
}
