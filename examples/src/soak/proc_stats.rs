//! The server's footprint, read from /proc: resident memory and open descriptors.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Tally;

/// One look at a process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) rss_kib: u64,
    pub(crate) fds: usize,
}

impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RSS {:.1} MiB, {} fds",
            self.rss_kib as f64 / 1024.0,
            self.fds
        )
    }
}

pub(crate) fn sample(pid: u32) -> std::io::Result<Sample> {
    let rss_kib = examples::child::rss_kib(pid)?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count();
    Ok(Sample { rss_kib, fds })
}

/// Prints a line a second (time, calls and errors so far, the server's footprint)
/// until `stop`.
pub(crate) fn every_second(
    pid: u32,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let t0 = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut last_calls = 0;
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let calls = tally.calls.load(Ordering::Relaxed);
            let s = match sample(pid) {
                Ok(s) => s.to_string(),
                Err(e) => format!("server unreadable: {e}"),
            };
            println!(
                "t={:>4}s calls {:>9} (+{:>6}/s) errors {:>5}  server {s}",
                t0.elapsed().as_secs(),
                calls,
                calls - last_calls,
                tally.errors.load(Ordering::Relaxed),
            );
            last_calls = calls;
        }
    })
}
