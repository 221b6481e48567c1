//! `rdma-pingpong`: raw verbs round-trip latency and bandwidth on an RDMA provider,
//! measured in the same run against the same exchange over TCP. See `--help`.

mod cli;
mod oob;
mod rdma;
mod report;
mod stats;
mod tcp;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, ExitCode, Stdio};

use clap::Parser;

use crate::cli::Args;
use crate::oob::{Oob, Params};

/// Errors are reported once, in `main`.
pub(crate) type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let side = if args.serve || args.listen.is_some() {
                "server"
            } else {
                "client"
            };
            eprintln!("rdma-pingpong ({side}): {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    if args.serve || args.listen.is_some() {
        return serve(args);
    }
    let params = Params {
        size: args.size,
        iters: args.iters,
        warmup: args.warmup,
        window: args.window,
        inline: args.inline,
    };
    let (addr, server) = match &args.connect {
        Some(addr) => (addr.clone(), None),
        None => {
            let (addr, child) = spawn_server(args)?;
            (addr, Some(child))
        }
    };

    let mut oob = Oob::new(TcpStream::connect(&addr)?)?;
    oob.send_params(params)?;
    let (provider, rdma) = rdma::client(&args.device, params, &mut oob)?;
    let tcp = tcp::client(&addr, params)?;
    oob.send_word("BYE")?;
    if let Some(mut child) = server {
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("server process failed: {status}").into());
        }
    }

    let key = provider.to_string();
    report::print_table(params, &args.device, &key, &rdma, &tcp);
    if let Some(path) = &args.json {
        report::write_json(path, &key, &rdma, &tcp)?;
    }
    Ok(())
}

/// Server side: one client, RDMA phases then the TCP baseline.
fn serve(args: &Args) -> Result<()> {
    let listener = match args.listen {
        // By hand the client may be on another host.
        Some(port) => TcpListener::bind(("0.0.0.0", port))?,
        None => TcpListener::bind("127.0.0.1:0")?,
    };
    // The spawning client reads this line to learn the port.
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", listener.local_addr()?)?;
    out.flush()?;
    drop(out);

    let (stream, _) = listener.accept()?;
    let mut oob = Oob::new(stream)?;
    let params = oob.recv_params()?;
    rdma::serve(&args.device, params, &mut oob)?;
    tcp::serve(&listener, params)?;
    oob.expect_word("BYE")
}

/// Starts this program again as the server process and returns the address it listens
/// on. The server's stderr is shared, so its errors show up in this terminal.
fn spawn_server(args: &Args) -> Result<(String, Child)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--serve", "--device", &args.device])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("server stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("unexpected first line from the server: {line:?}"))?;
    Ok((addr.to_string(), child))
}
