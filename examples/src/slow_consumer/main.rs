//! The slow-consumer check: a server (a child process) streams `--bytes` (1 GiB) in
//! `--message` (64 KiB) messages to a client that reads one message every
//! `--read-every` (1 ms), while a second stream on the same channel (the same RC
//! connection) is read as fast as it goes. Both processes' RSS is sampled once a
//! second; the program prints RSS over time, the second stream's throughput while
//! the slow one runs, and each process's largest RSS growth over its baseline.
//!
//! The engine bounds what a stream buffers (`STREAM_WINDOW`, 1 MiB of message
//! charges per direction, each message its length plus 32 B; see
//! `rpc-core/src/engine/wire.rs`, "Streaming calls"): the growth should stay
//! near that bound however long the slow stream runs, and the fast stream should not
//! stall behind the slow one.
//!
//! `slow-consumer [--bytes 1GiB] [--message 64KiB] [--read-every 1ms]`

mod args;
mod rss;
mod server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rpc_core::transport::Channel;
use rpc_core::Status;

use slowconsumer::firehose_client::FirehoseClient;
use slowconsumer::PourRequest;

/// `proto/slow_consumer.proto`.
#[allow(missing_docs, unreachable_pub, dead_code)]
mod slowconsumer {
    rpc_core::include_proto!("slowconsumer");
}

/// Bytes of message charges a receiver lets its peer send before granting more:
/// the engine's `STREAM_WINDOW` (`rpc-core/src/engine/wire.rs`), the bound this
/// checks. Each message is charged its length plus [`MESSAGE_CHARGE`].
const STREAM_WINDOW: u64 = 1 << 20;
/// The engine's `MESSAGE_CHARGE`.
const MESSAGE_CHARGE: u64 = 32;

/// Messages of `message` bytes that one window lets begin.
fn window_messages(message: u64) -> u64 {
    STREAM_WINDOW.div_ceil(message + MESSAGE_CHARGE)
}

#[derive(Parser)]
#[command(about = "A slow stream reader beside a fast one: both processes' RSS over time")]
struct Args {
    /// Bytes the slow stream carries (B, KiB, MiB, GiB).
    #[arg(long, default_value = "1GiB", value_parser = args::bytes)]
    bytes: u64,
    /// Data bytes per message (both streams).
    #[arg(long, default_value = "64KiB", value_parser = args::bytes)]
    message: u64,
    /// The slow reader takes one message this often (us, ms, s).
    #[arg(long, default_value = "1ms", value_parser = args::duration)]
    read_every: Duration,
    /// Seconds the fast stream runs alone first (its throughput without the slow one).
    #[arg(long, default_value_t = 3)]
    alone_seconds: u32,
    /// Internal: serve (the server child) instead of reading.
    #[arg(long, hide = true)]
    serve: bool,
}

/// What the readers have taken so far.
#[derive(Default)]
struct Progress {
    slow_messages: AtomicU64,
    slow_bytes: AtomicU64,
    fast_bytes: AtomicU64,
}

/// Both processes' RSS in KiB, and what the readers had at that moment.
#[derive(Clone, Copy)]
struct Sample {
    at: Instant,
    client: u64,
    server: u64,
    slow_messages: u64,
    fast_bytes: u64,
}

impl Sample {
    /// The fast stream's MiB/s since `before`.
    fn fast_rate(&self, before: &Sample) -> f64 {
        let dt = self.at.duration_since(before.at).as_secs_f64();
        args::mib(self.fast_bytes - before.fast_bytes) / dt
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::init_tracing();
    let args = Args::parse();
    if args.serve {
        return server::serve().await;
    }
    let message = u32::try_from(args.message)
        .ok()
        .filter(|m| *m > 0)
        .ok_or("--message must be between 1 and 4 GiB")?;
    let server = examples::child::ServerChild::spawn_self("--serve")?;
    let channel = Channel::from_shared(format!("rdma://127.0.0.1:{}", server.port))?
        .connect()
        .await?;
    let client = FirehoseClient::new(channel);
    let me = std::process::id();

    // Warm up: two streams at once, each through several windows, so that the
    // baseline is that of a connection whose pools and buffers have been used.
    let warm = PourRequest {
        bytes: 4 * window_messages(args.message) * args.message,
        message,
    };
    let (a, b) = tokio::join!(drain(client.clone(), warm), drain(client.clone(), warm));
    a?;
    b?;
    let take = |p: &Progress| -> std::io::Result<Sample> {
        Ok(Sample {
            at: Instant::now(),
            client: examples::child::rss_kib(me)?,
            server: examples::child::rss_kib(server.pid)?,
            slow_messages: p.slow_messages.load(Ordering::Relaxed),
            fast_bytes: p.fast_bytes.load(Ordering::Relaxed),
        })
    };
    let progress = Arc::new(Progress::default());
    let base = take(&progress)?;
    println!(
        "slow stream: {:.1} MiB in {} B messages, one read every {:?}; fast stream beside it on the same connection",
        args::mib(args.bytes),
        args.message,
        args.read_every
    );
    println!(
        "baseline RSS after warm-up: client {:.1} MiB (pid {me}), server {:.1} MiB (pid {})",
        rss::mib(base.client),
        rss::mib(base.server),
        server.pid
    );

    // The fast stream alone first: what it moves with the connection to itself.
    let fast = tokio::spawn(fast_reader(client.clone(), message, progress.clone()));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut last = base;
    let mut alone = Vec::new();
    for _ in 0..args.alone_seconds {
        tick.tick().await;
        let s = take(&progress)?;
        let fast_rate = s.fast_rate(&last);
        println!(
            "fast alone: {fast_rate:>8.1} MiB/s  client {:>7.1} MiB  server {:>7.1} MiB",
            rss::mib(s.client),
            rss::mib(s.server),
        );
        alone.push(fast_rate);
        last = s;
    }

    let start = Instant::now();
    let fast_at_start = progress.fast_bytes.load(Ordering::Relaxed);
    let mut slow = tokio::spawn(slow_reader(
        client.clone(),
        PourRequest {
            bytes: args.bytes,
            message,
        },
        args.read_every,
        progress.clone(),
    ));
    tick.reset();
    last = take(&progress)?;
    let mut samples = Vec::new();
    let slow_result = loop {
        tokio::select! {
            r = &mut slow => break r,
            _ = tick.tick() => {
                let s = take(&progress)?;
                let fast_rate = s.fast_rate(&last);
                let dt = s.at.duration_since(last.at).as_secs_f64();
                println!(
                    "t={:>4}s client {:>7.1} MiB ({:+6.1})  server {:>7.1} MiB ({:+6.1})  slow {:>6} msgs ({:>5.0}/s)  fast {fast_rate:>8.1} MiB/s",
                    start.elapsed().as_secs(),
                    rss::mib(s.client),
                    rss::mib_delta(s.client, base.client),
                    rss::mib(s.server),
                    rss::mib_delta(s.server, base.server),
                    s.slow_messages,
                    (s.slow_messages - last.slow_messages) as f64 / dt,
                );
                samples.push((s, fast_rate));
                last = s;
            }
        }
    };
    let slow_time = start.elapsed();
    let mut end = take(&progress)?;
    end.fast_bytes -= fast_at_start;
    fast.abort();
    let fast_error = match fast.await {
        Ok(Err(s)) => Some(s),
        _ => None,
    };
    slow_result??;
    drop(server);

    report(
        &args,
        &Run {
            base,
            end,
            alone,
            samples,
            slow_time,
            slow_bytes: progress.slow_bytes.load(Ordering::Relaxed),
            fast_error,
        },
    );
    Ok(())
}

/// Reads a whole stream as fast as it comes.
async fn drain(mut client: FirehoseClient<Channel>, req: PourRequest) -> Result<(), Status> {
    let mut s = client.pour(req).await?.into_inner();
    while s.message().await?.is_some() {}
    Ok(())
}

/// Reads one message per `every` (never faster: a late tick is not made up).
async fn slow_reader(
    mut client: FirehoseClient<Channel>,
    req: PourRequest,
    every: Duration,
    p: Arc<Progress>,
) -> Result<(), Status> {
    let mut s = client.pour(req).await?.into_inner();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(b) = s.message().await? else {
            return Ok(());
        };
        p.slow_bytes
            .fetch_add(b.data.len() as u64, Ordering::Relaxed);
        p.slow_messages.fetch_add(1, Ordering::Relaxed);
    }
}

/// Reads an endless stream as fast as it comes, until aborted.
async fn fast_reader(
    mut client: FirehoseClient<Channel>,
    message: u32,
    p: Arc<Progress>,
) -> Result<(), Status> {
    let req = PourRequest {
        bytes: u64::MAX,
        message,
    };
    let mut s = client.pour(req).await?.into_inner();
    while let Some(b) = s.message().await? {
        p.fast_bytes
            .fetch_add(b.data.len() as u64, Ordering::Relaxed);
    }
    Err(Status::internal("the endless stream ended"))
}

/// What one run measured.
struct Run {
    base: Sample,
    /// At the slow stream's end (`fast_bytes`: moved while it ran).
    end: Sample,
    /// The fast stream's MiB/s while alone, once a second.
    alone: Vec<f64>,
    /// Once a second while the slow stream ran, with the fast stream's MiB/s.
    samples: Vec<(Sample, f64)>,
    slow_time: Duration,
    slow_bytes: u64,
    fast_error: Option<Status>,
}

fn report(args: &Args, run: &Run) {
    let Run {
        base,
        end,
        alone,
        samples,
        slow_time,
        slow_bytes,
        fast_error,
    } = run;
    let secs = slow_time.as_secs_f64();
    println!(
        "slow stream: {} messages, {:.1} MiB in {secs:.1} s ({:.0} messages/s)",
        end.slow_messages,
        args::mib(*slow_bytes),
        end.slow_messages as f64 / secs
    );
    if !alone.is_empty() {
        println!(
            "fast stream alone before it: {:.1} MiB/s",
            alone.iter().sum::<f64>() / alone.len() as f64
        );
    }
    let per_second = samples.iter().map(|(_, r)| *r);
    let spread = match (
        per_second.clone().reduce(f64::min),
        per_second.reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) => format!("; per second min {lo:.1}, max {hi:.1} MiB/s"),
        _ => String::new(),
    };
    println!(
        "fast stream during it: {:.1} MiB in {secs:.1} s = {:.1} MiB/s{spread}{}",
        args::mib(end.fast_bytes),
        args::mib(end.fast_bytes) / secs,
        fast_error
            .as_ref()
            .map_or(String::new(), |s| format!("; it failed: {s}")),
    );
    let all = samples.iter().map(|(s, _)| s).chain([end]);
    let (max_client, max_server) = all.fold((base.client, base.server), |(c, s), x| {
        (c.max(x.client), s.max(x.server))
    });
    println!(
        "client RSS: baseline {:.1} MiB, max {:.1} MiB, max growth {:+.1} MiB",
        rss::mib(base.client),
        rss::mib(max_client),
        rss::mib_delta(max_client, base.client)
    );
    println!(
        "server RSS: baseline {:.1} MiB, max {:.1} MiB, max growth {:+.1} MiB",
        rss::mib(base.server),
        rss::mib(max_server),
        rss::mib_delta(max_server, base.server)
    );
    println!(
        "per-stream bound: a window of {} messages × {} B = {:.2} MiB buffered at a receiver, plus one message in reassembly and one going out in fragments at the sender",
        window_messages(args.message),
        args.message,
        args::mib(window_messages(args.message) * args.message)
    );
}
