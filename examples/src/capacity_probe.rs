//! Server memory against RC connections: `capacity-probe [--steps 10,100,1000]`.
//!
//! Runs a greeter server in a child process (this program with `serve`) on
//! 127.0.0.1 at default settings, then from this process opens RC channels at
//! default settings in steps, each calling once, and prints the server's resident
//! memory (VmRSS) at each step and after every client has left. The baseline is
//! taken after one warm-up client connected, called and left. At the baseline and
//! after each round it also says where the memory is (`RssParts`): the allocator's
//! heaps, other anonymous memory (the receive pool among it), files.

use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use examples::child::{rss_kib, serve_until_stdin_closes, settled_rss, ServerChild};
use examples::greeter::MyGreeter;
use examples::hello_world::greeter_client::GreeterClient;
use examples::hello_world::greeter_server::GreeterServer;
use examples::hello_world::HelloRequest;
use examples::rss_parts::RssParts;
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;

#[derive(Parser)]
#[command(about = "Measures a server's RSS against the number of RC clients")]
struct Args {
    /// Client counts to measure at, ascending.
    #[arg(long, default_value = "10,100,1000", value_delimiter = ',')]
    steps: Vec<usize>,
    /// Times to run the steps, every client leaving after each run (a second run
    /// shows whether memory left behind is reused or lost).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Before the rounds: this many clients one after another, each connecting,
    /// calling once and leaving (churn), then the server's footprint against the
    /// baseline.
    #[arg(long, default_value_t = 0)]
    cycles: usize,
    /// Seconds to keep the server up after the last round, to inspect it (e.g. its
    /// allocator with `gdb -p PID -batch -ex 'call (void)malloc_stats()'`).
    #[arg(long, default_value_t = 0)]
    linger: u64,
    /// Runs the server under this program (e.g. `heaptrack`, `valgrind --tool=massif`);
    /// the figures then are the wrapper's, use its own output.
    #[arg(long, value_delimiter = ' ')]
    wrap: Vec<String>,
    /// Serve (the child's role): prints `listening ADDR`, serves until stdin closes.
    #[arg(hide = true)]
    serve: Option<String>,
}

/// Open descriptors and threads of the server (a leak of sockets or tasks shows here).
fn fds_threads(pid: u32) -> (usize, usize) {
    let count = |d: String| std::fs::read_dir(d).map_or(0, |r| r.count());
    (
        count(format!("/proc/{pid}/fd")),
        count(format!("/proc/{pid}/task")),
    )
}

async fn call(ch: &Channel) -> Result<(), Box<dyn std::error::Error>> {
    let mut c = GreeterClient::new(ch.clone());
    c.say_hello(Request::new(HelloRequest { name: "p".into() }))
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::init_tracing();
    let args = Args::parse();
    if args.serve.as_deref() == Some("serve") {
        let router = Server::builder().add_service(GreeterServer::new(MyGreeter));
        return serve_until_stdin_closes(router).await;
    }
    let exe = std::env::current_exe()?;
    let mut command = match args.wrap.split_first() {
        Some((wrapper, wrapper_args)) => {
            let mut c = Command::new(wrapper);
            c.args(wrapper_args).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    command.arg("serve");
    let server = ServerChild::spawn(command)?;
    let pid = server.pid;
    let addr = format!("127.0.0.1:{}", server.port);
    let uri = format!("rdma://{addr}");
    {
        let warm = Channel::connect(uri.clone()).await?;
        call(&warm).await?;
    }
    let baseline = settled_rss(pid).await;
    let (fds, threads) = fds_threads(pid);
    println!("server pid {pid}; baseline (after one client came and went): {baseline} KiB, {fds} fds, {threads} threads");
    let parts0 = RssParts::of(pid)?;
    println!("  resident at baseline: {parts0}");
    if args.cycles > 0 {
        let t0 = Instant::now();
        for _ in 0..args.cycles {
            let ch = Channel::connect(uri.clone()).await?;
            call(&ch).await?;
        }
        let after = settled_rss(pid).await;
        let (fds, threads) = fds_threads(pid);
        println!(
            "{} connect/call/leave cycles in {:.1?}: server RSS {after} KiB ({:+.1} % of baseline), {fds} fds, {threads} threads",
            args.cycles,
            t0.elapsed(),
            (after as f64 - baseline as f64) * 100.0 / baseline as f64
        );
    }
    for round in 1..=args.rounds {
        let mut clients = Vec::new();
        for &n in &args.steps {
            let t0 = Instant::now();
            while clients.len() < n {
                let ch = Channel::connect(uri.clone()).await?;
                call(&ch).await?;
                clients.push(ch);
            }
            // Every client calls again, all at once.
            let calls: Vec<_> = clients
                .iter()
                .map(|ch| {
                    let ch = ch.clone();
                    tokio::spawn(async move { call(&ch).await.map_err(|e| e.to_string()) })
                })
                .collect();
            for c in calls {
                c.await??;
            }
            let (fds, threads) = fds_threads(pid);
            println!(
                "round {round}: {n:>6} clients: server RSS {:>8} KiB, {fds} fds, {threads} threads  ({:.1?} to connect and call)",
                rss_kib(pid).expect("server's /proc status"),
                t0.elapsed()
            );
        }
        drop(clients);
        let after = settled_rss(pid).await;
        let (fds, threads) = fds_threads(pid);
        println!(
            "round {round}: after all left: server RSS {after} KiB ({:+.1} % of baseline), {fds} fds, {threads} threads",
            (after as f64 - baseline as f64) * 100.0 / baseline as f64
        );
        let parts = RssParts::of(pid)?;
        println!(
            "  resident: {parts}; against the baseline: heap {:+} KiB, other anonymous {:+} KiB, files {:+} KiB",
            parts.heap as i64 - parts0.heap as i64,
            parts.anon as i64 - parts0.anon as i64,
            parts.files as i64 - parts0.files as i64,
        );
    }
    if args.linger > 0 {
        println!("server pid {pid} stays up {} s", args.linger);
        tokio::time::sleep(Duration::from_secs(args.linger)).await;
    }
    drop(server);
    Ok(())
}
