//! A server in a child process of its own (this program run again), so that the
//! footprint read from `/proc` is the server's alone: the soak, slow-consumer and
//! capacity-probe examples measure their servers this way (and client-probe its
//! client), with [`rss_kib`] and [`settled_rss`].

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rpc_core::transport::Router;

/// In the child: serves `router` on 127.0.0.1 until stdin closes, printing
/// `PORT <port>` first.
pub async fn serve_until_stdin_closes(router: Router) -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("PORT {}", listener.local_addr()?.port());
    // Stdin is read on a blocking thread: its end is the parent saying stop.
    let eof = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new()));
    let stop = async {
        let _ = eof.await;
    };
    router.serve_with_listener(listener, stop).await?;
    Ok(())
}

/// The server child; stopped (stdin closed, then waited for) when dropped.
pub struct ServerChild {
    child: std::process::Child,
    /// The port it serves on, at 127.0.0.1.
    pub port: u16,
    /// Its process id (a wrapper's, when `command` runs the server under one).
    pub pid: u32,
}

impl ServerChild {
    /// Runs this program again with `arg`, which must make it call
    /// [`serve_until_stdin_closes`].
    pub fn spawn_self(arg: &str) -> std::io::Result<ServerChild> {
        let mut command = Command::new(std::env::current_exe()?);
        command.arg(arg);
        ServerChild::spawn(command)
    }

    /// Runs `command` and waits for its `PORT` line (lines before it, as a wrapper
    /// such as valgrind may print, are skipped).
    pub fn spawn(mut command: Command) -> std::io::Result<ServerChild> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let pid = child.id();
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        let port = loop {
            line.clear();
            if out.read_line(&mut line)? == 0 {
                return Err(std::io::Error::other(
                    "the server child exited without saying its port",
                ));
            }
            if let Some(port) = line.trim().strip_prefix("PORT ") {
                break port
                    .parse()
                    .map_err(|_| std::io::Error::other(format!("server child said {line:?}")))?;
            }
        };
        Ok(ServerChild { child, port, pid })
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Resident memory (VmRSS) of `pid` in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> std::io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no VmRSS in /proc/{pid}/status")))
}

/// The RSS of `pid` once it stops falling (2 s without a drop of 1 %), 20 s at most:
/// what a process keeps after it has freed what it will free.
pub async fn settled_rss(pid: u32) -> u64 {
    let t0 = Instant::now();
    let mut last = rss_kib(pid).expect("the process's /proc status");
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = rss_kib(pid).expect("the process's /proc status");
        if now * 100 >= last * 99 || t0.elapsed() > Duration::from_secs(20) {
            return now;
        }
        last = now;
    }
}
