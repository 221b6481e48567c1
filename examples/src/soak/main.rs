//! The soak: many connections calling for a long time, then all leaving, against a
//! server in its own process whose RSS and descriptors are sampled once a second.
//!
//! `soak [--connections 1000] [--seconds 60] [--interval-ms 100] [--ud] [--credits N]`
//! prints one line a second (calls, errors, server RSS and fds), then the errors by
//! message and the latency percentiles. Run it through `scripts/soak`.

mod proc_stats;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use examples::greeter::MyGreeter;
use examples::hello_world::greeter_client::GreeterClient;
use examples::hello_world::greeter_server::GreeterServer;
use examples::hello_world::HelloRequest;
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::Request;

#[derive(Parser)]
#[command(about = "Soak: N connections × T seconds of unary calls, then all leave")]
struct Args {
    /// Connections (each its own channel, each calling in turn).
    #[arg(long, default_value_t = 1000)]
    connections: usize,
    /// Seconds of calls once every connection is up.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Pause between one connection's calls (0: back to back).
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// Seconds to keep sampling the server after every connection has left.
    #[arg(long, default_value_t = 10)]
    after: u64,
    /// Calls over UD instead of RC.
    #[arg(long)]
    ud: bool,
    /// Credits each RC connection asks for (default: the endpoint's).
    #[arg(long)]
    credits: Option<u32>,
    /// Connects in flight at once while the connections are opened.
    #[arg(long, default_value_t = 32)]
    connect_parallelism: usize,
    /// Internal: serve (the soak's server child) instead of driving.
    #[arg(long, hide = true)]
    serve: bool,
}

/// What the callers share: counters, latencies, errors by message.
#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    errors: AtomicU64,
    by_message: Mutex<BTreeMap<String, u64>>,
    latencies_us: Mutex<Vec<u32>>,
}

impl Tally {
    fn error(&self, e: impl ToString) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut m = self.by_message.lock().unwrap();
        *m.entry(e.to_string()).or_default() += 1;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::init_tracing();
    let args = Args::parse();
    if args.serve {
        // The server runs in a child of its own, so its footprint is its alone.
        let router = Server::builder().add_service(GreeterServer::new(MyGreeter));
        return examples::child::serve_until_stdin_closes(router).await;
    }
    let server = examples::child::ServerChild::spawn_self("--serve")?;
    let addr = format!("rdma://127.0.0.1:{}", server.port);
    let pid = server.pid;
    // One call first: the server has built its queues and pools (after printing its
    // port), so the baseline is a started server's.
    GreeterClient::connect(addr.clone())
        .await?
        .say_hello(Request::new(HelloRequest {
            name: "warm-up".into(),
        }))
        .await?;
    let first = proc_stats::sample(pid)?;
    // The baseline is taken once that client has left and the server has settled,
    // as capacity-probe's: a first close starts what a process does once (the heap
    // trim's thread and its arena, the code it runs), which is not the soak's to
    // count against the connections.
    let baseline = proc_stats::Sample {
        rss_kib: examples::child::settled_rss(pid).await,
        ..proc_stats::sample(pid)?
    };
    println!(
        "soak: {} {} connections × {} s, {} ms between a connection's calls, server pid {pid}",
        args.connections,
        if args.ud { "UD" } else { "RC" },
        args.seconds,
        args.interval_ms
    );
    println!("server after one call: {first}");
    println!("baseline (that client gone, settled): {baseline}");

    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = proc_stats::every_second(pid, tally.clone(), stop.clone());

    // Connect everything first.
    let t0 = Instant::now();
    let mut channels = Vec::with_capacity(args.connections);
    let mut pending = tokio::task::JoinSet::new();
    let mut next = 0;
    while next < args.connections || !pending.is_empty() {
        while next < args.connections && pending.len() < args.connect_parallelism {
            let mut ep = Endpoint::from_shared(addr.clone())?.ud(args.ud);
            if let Some(c) = args.credits {
                ep = ep.credits(c);
            }
            pending.spawn(async move { ep.connect().await });
            next += 1;
        }
        match pending.join_next().await {
            Some(Ok(Ok(ch))) => channels.push(ch),
            Some(Ok(Err(e))) => tally.error(format!("connect: {e}")),
            Some(Err(e)) => tally.error(format!("connect task: {e}")),
            None => break,
        }
    }
    let connected = channels.len();
    println!(
        "connected {connected} of {} in {:?}; server: {}",
        args.connections,
        t0.elapsed(),
        proc_stats::sample(pid)?
    );

    // Call for the soak's duration.
    let end = Instant::now() + Duration::from_secs(args.seconds);
    let mut callers = tokio::task::JoinSet::new();
    for (i, ch) in channels.into_iter().enumerate() {
        callers.spawn(caller(i, ch, end, args.interval_ms, tally.clone()));
    }
    while callers.join_next().await.is_some() {}
    // Every channel has been dropped by its caller: all connections leave.
    println!(
        "all {connected} connections left; server: {}",
        proc_stats::sample(pid)?
    );
    tokio::time::sleep(Duration::from_secs(args.after)).await;
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    let after = proc_stats::sample(pid)?;
    drop(server);

    report(&tally, &baseline, &after);
    Ok(())
}

async fn caller(id: usize, ch: Channel, end: Instant, interval_ms: u64, tally: Arc<Tally>) {
    let mut client = GreeterClient::new(ch);
    let mut lat = Vec::new();
    let name = format!("soak-{id}");
    // Spread the first calls over one interval, so that the connections don't beat.
    let pause = Duration::from_millis(interval_ms);
    if interval_ms > 0 {
        let offset = (id as u64 * 7919) % interval_ms;
        tokio::time::sleep(Duration::from_millis(offset)).await;
    }
    while Instant::now() < end {
        let mut req = Request::new(HelloRequest { name: name.clone() });
        req.set_timeout(Duration::from_secs(10));
        let t = Instant::now();
        match client.say_hello(req).await {
            Ok(_) => {
                lat.push(t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
                tally.calls.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tally.error(format!("{:?}: {}", e.code(), e.message())),
        }
        if interval_ms > 0 {
            tokio::time::sleep(pause).await;
        }
    }
    tally.latencies_us.lock().unwrap().extend(lat);
}

fn report(tally: &Tally, before: &proc_stats::Sample, after: &proc_stats::Sample) {
    let mut lat = std::mem::take(&mut *tally.latencies_us.lock().unwrap());
    lat.sort_unstable();
    let pct = |p: f64| -> String {
        if lat.is_empty() {
            return "-".into();
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        format!("{} µs", lat[i])
    };
    println!(
        "calls ok {}, errors {}",
        tally.calls.load(Ordering::Relaxed),
        tally.errors.load(Ordering::Relaxed)
    );
    for (m, n) in tally.by_message.lock().unwrap().iter() {
        println!("  {n} × {m}");
    }
    println!(
        "latency p50 {} p90 {} p99 {} p99.9 {} max {}",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(0.999),
        pct(1.0)
    );
    println!("baseline: {before}");
    println!(
        "server after:  {after} ({:+.1} % of baseline)",
        (after.rss_kib as f64 - before.rss_kib as f64) * 100.0 / before.rss_kib as f64
    );
}
