//! A `serve` child process of this binary, its control pipe, and the guard that
//! stops it whatever happens to the run.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::provider::Provider;
use crate::server::{CPU, LISTENING};
use crate::system::System;

/// A running server process. Dropping it closes its stdin (it exits), waits a
/// little, then kills it and waits.
pub(crate) struct ServerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    addr: SocketAddr,
}

impl ServerProcess {
    /// Starts `rpc-bench serve --system S --port 0` and reads the address it bound.
    pub(crate) fn start(system: System, provider: &Provider) -> Result<ServerProcess, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .args(["serve", "--system", system.name(), "--port", "0"])
            .args(provider.args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting the {system} server: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(BufReader::new);
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err("server pipes missing".into());
        };
        let mut server = ServerProcess {
            child,
            stdin: Some(stdin),
            stdout,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let line = server.read_line()?;
        server.addr = line
            .strip_prefix(LISTENING)
            .and_then(|a| a.trim().parse().ok())
            .ok_or_else(|| format!("the {system} server said {line:?}, not its address"))?;
        Ok(server)
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server process's CPU time so far.
    pub(crate) fn cpu(&mut self) -> Result<Duration, String> {
        let stdin = self.stdin.as_mut().ok_or("server stopped")?;
        writeln!(stdin, "{CPU}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("server control: {e}"))?;
        let line = self.read_line()?;
        line.strip_prefix(CPU)
            .and_then(|n| n.trim().parse::<u64>().ok())
            .map(Duration::from_nanos)
            .ok_or_else(|| format!("server answered {line:?} to {CPU}"))
    }

    fn read_line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err("the server exited".into()),
            Ok(_) => Ok(line.trim_end().to_string()),
            Err(e) => Err(format!("reading from the server: {e}")),
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // End of stdin asks for a clean exit; a server that ignores it is killed.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
