//! Client memory against RC channels: `client-probe [--channels 1000] [--rounds 2]`.
//!
//! Serves a greeter on 127.0.0.1 in this process at default settings, and runs the
//! client in a child process (this program with `client`), so that the footprint
//! read from `/proc` is the client's alone. Each round the child opens `--channels`
//! RC channels at default settings, each calling once, then drops them all; this
//! prints the child's resident memory (VmRSS) with them open, just after they were
//! dropped, and once it has settled. The baseline is taken after one warm-up channel
//! connected, called and was dropped.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use clap::Parser;
use examples::child::{rss_kib, settled_rss};
use examples::greeter::MyGreeter;
use examples::hello_world::greeter_client::GreeterClient;
use examples::hello_world::greeter_server::GreeterServer;
use examples::hello_world::HelloRequest;
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;

#[derive(Parser)]
#[command(about = "Measures a client's RSS as it opens and drops many RC channels")]
struct Args {
    /// Channels the client opens (and calls on) each round before dropping them all.
    #[arg(long, default_value_t = 1000)]
    channels: usize,
    /// Rounds of open, call and drop (a second shows whether memory is reused).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// The child's role: `client PORT`.
    #[arg(hide = true, num_args = 2)]
    client: Vec<String>,
}

/// What the parent writes to the child's stdin, one a line.
const OPEN: &str = "open";
const DROP: &str = "drop";

async fn call(ch: &Channel) -> Result<(), Box<dyn std::error::Error>> {
    let mut c = GreeterClient::new(ch.clone());
    c.say_hello(Request::new(HelloRequest { name: "p".into() }))
        .await?;
    Ok(())
}

/// In the child: after a warm-up channel, prints `ready`; then, per line of stdin,
/// `open` opens `n` channels (each calls once) and prints `opened N`, `drop` drops
/// them and prints `dropped`. Ends with stdin.
async fn client(port: &str, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let uri = format!("rdma://127.0.0.1:{port}");
    {
        let warm = Channel::connect(uri.clone()).await?;
        call(&warm).await?;
    }
    let (tx, mut commands) = tokio::sync::mpsc::unbounded_channel::<String>();
    // Stdin is read on a thread of its own: its lines are the parent's commands.
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    println!("ready");
    let mut open = Vec::new();
    while let Some(cmd) = commands.recv().await {
        match cmd.trim() {
            OPEN => {
                while open.len() < n {
                    let ch = Channel::connect(uri.clone()).await?;
                    call(&ch).await?;
                    open.push(ch);
                }
                println!("opened {}", open.len());
            }
            DROP => {
                open.clear();
                println!("dropped");
            }
            other => return Err(format!("unknown command {other:?}").into()),
        }
    }
    Ok(())
}

/// The parent's side of the child: its pid, stdin and stdout lines.
struct ClientChild {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl ClientChild {
    /// Sends `cmd` (if any), then reads the child's next line.
    fn say(&mut self, cmd: Option<&str>) -> Result<String, Box<dyn std::error::Error>> {
        if let Some(cmd) = cmd {
            let stdin = self.child.stdin.as_mut().ok_or("child stdin closed")?;
            writeln!(stdin, "{cmd}")?;
        }
        let mut line = String::new();
        if self.out.read_line(&mut line)? == 0 {
            return Err("the client child exited".into());
        }
        Ok(line.trim().to_string())
    }
}

impl Drop for ClientChild {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn pct(v: u64, base: u64) -> f64 {
    (v as f64 - base as f64) * 100.0 / base as f64
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::init_tracing();
    let args = Args::parse();
    if let [role, port] = args.client.as_slice() {
        if role != "client" {
            return Err(format!("unknown role {role:?}").into());
        }
        return client(port, args.channels).await;
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        Server::builder()
            .add_service(GreeterServer::new(MyGreeter))
            .serve_with_listener(listener, async {
                let _ = stopped.await;
            }),
    );

    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "--channels",
            &args.channels.to_string(),
            "client",
            &port.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let out = BufReader::new(child.stdout.take().ok_or("child stdout")?);
    let pid = child.id();
    let mut child = ClientChild { child, out };
    // The child's lines are read on this (the main) thread, which blocks on them; the
    // server runs on the runtime's workers meanwhile.
    let ready = child.say(None)?;
    if ready != "ready" {
        return Err(format!("the client child said {ready:?}").into());
    }
    let baseline = settled_rss(pid).await;
    println!("client pid {pid}; baseline (after one channel came and went): {baseline} KiB");
    for round in 1..=args.rounds {
        let opened = child.say(Some(OPEN))?;
        let open = rss_kib(pid)?;
        println!(
            "round {round}: {opened}: client RSS {open} KiB ({:+.1} % of baseline)",
            pct(open, baseline)
        );
        let dropped = child.say(Some(DROP))?;
        let right_after = rss_kib(pid)?;
        let settled = settled_rss(pid).await;
        println!(
            "round {round}: {dropped}: client RSS {right_after} KiB at once, {settled} KiB settled ({:+.1} % of baseline)",
            pct(settled, baseline)
        );
    }
    drop(child);
    let _ = stop.send(());
    server.await??;
    Ok(())
}
