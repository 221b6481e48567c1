//! Two-process plumbing: the parent re-executes this test binary to run one test as a
//! child process, and the two trade text records (`@@ key value` lines) over the
//! child's stdin and stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rpc_transport::RemoteMr;

/// Set in the child's environment to the role it plays; its absence means "parent".
pub const CHILD_ENV: &str = "RDMA_RPC_CONFORMANCE_CHILD";
/// The libtest name of the child entry point.
pub const CHILD_TEST: &str = "two_process::child_process_entry";
/// Marks protocol lines among libtest's own output.
const TAG: &str = "@@ ";
/// Process start-up included, on a machine busy compiling.
const CHILD_DEADLINE: Duration = Duration::from_secs(60);

/// The role this process was started for, if it is a child.
pub fn role() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// The parent's handle on a running child.
pub struct ChildProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Everything the child printed that was not protocol, for failure messages.
    other: Vec<String>,
    stderr: Option<JoinHandle<String>>,
}

impl ChildProc {
    /// Starts this binary again running only [`CHILD_TEST`] with role `role`.
    pub fn spawn(role: &str) -> ChildProc {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .args(["--exact", CHILD_TEST, "--ignored", "--nocapture"])
            .arg("--test-threads=1")
            .env(CHILD_ENV, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the child test process");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("child stdout");
        let stderr = child.stderr.take().expect("child stderr");
        let (tx, lines) = mpsc::channel();
        // A reader thread turns the blocking pipe into a channel we can wait on with a
        // deadline; it ends when the child closes stdout (exits).
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
            s
        });
        ChildProc {
            child,
            stdin,
            lines,
            other: Vec::new(),
            stderr: Some(stderr),
        }
    }

    /// Sends record `key` to the child.
    pub fn send(&mut self, key: &str, value: &str) {
        let stdin = self.stdin.as_mut().expect("child stdin open");
        writeln!(stdin, "{TAG}{key} {value}")
            .and_then(|()| stdin.flush())
            .expect("writing to the child");
    }

    /// Waits for record `key` from the child and returns its value.
    pub fn recv(&mut self, key: &str) -> String {
        let start = Instant::now();
        loop {
            let left = CHILD_DEADLINE.saturating_sub(start.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) => match parse(&line, key) {
                    Some(v) => return v,
                    None => self.other.push(line),
                },
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("timed out waiting for {key:?} from the child"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("the child exited before sending {key:?}"))
                }
            }
        }
    }

    /// Waits for the child to exit and fails the test unless it passed.
    pub fn finish(mut self) {
        self.stdin.take();
        // The output channel disconnects when the child exits.
        let start = Instant::now();
        loop {
            let left = CHILD_DEADLINE.saturating_sub(start.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.other.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => self.fail("the child did not exit"),
            }
        }
        let status = self.child.wait().expect("waiting for the child");
        if !status.success() {
            self.fail(&format!("the child failed ({status})"));
        }
    }

    /// Kills the child (SIGKILL: no destructor of it runs) and reaps it.
    pub fn kill(&mut self) {
        self.child.kill().expect("killing the child");
        self.child.wait().expect("reaping the child");
    }

    fn fail(&mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        panic!(
            "{why}\n--- child stdout ---\n{}\n--- child stderr ---\n{stderr}",
            self.other.join("\n")
        );
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        // A parent that fails mid-exchange must not leave its child running.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The value of record `key` in `line`. The tag is searched for, not expected at the
/// start: libtest prints `test <name> ... ` without a newline before the test runs.
fn parse(line: &str, key: &str) -> Option<String> {
    let at = line.find(TAG)?;
    let rest = line[at + TAG.len()..].strip_prefix(key)?;
    Some(rest.strip_prefix(' ')?.to_string())
}

/// Child side: sends record `key` to the parent.
pub fn say(key: &str, value: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{TAG}{key} {value}")
        .and_then(|()| out.flush())
        .expect("writing to the parent");
}

/// Child side: waits for record `key` from the parent. A parent that dies closes the
/// pipe, which ends the child with a clear message rather than a hang.
pub fn hear(key: &str) -> String {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.expect("reading from the parent");
        if let Some(v) = parse(&line, key) {
            return v;
        }
    }
    panic!("the parent closed stdin before sending {key:?}");
}

/// `RemoteMr` as text: `addr:len:rkey` in hex.
pub fn mr_to_text(mr: &RemoteMr) -> String {
    format!("{:x}:{:x}:{:x}", mr.addr, mr.len, mr.rkey)
}

/// Inverse of [`mr_to_text`].
pub fn mr_from_text(s: &str) -> RemoteMr {
    let parts: Vec<u64> = s
        .split(':')
        .map(|p| u64::from_str_radix(p, 16).unwrap_or_else(|_| panic!("bad MR record {s:?}")))
        .collect();
    let [addr, len, rkey] = parts[..] else {
        panic!("bad MR record {s:?}");
    };
    RemoteMr {
        addr,
        len,
        rkey: u32::try_from(rkey).expect("rkey fits 32 bits"),
    }
}
