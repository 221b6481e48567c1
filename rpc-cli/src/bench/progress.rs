//! The progress line on standard error while a run goes (only on a terminal).

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::callers::Phase;

/// Redraws `calls done / total, elapsed, calls/s` every 200 ms until aborted.
pub(crate) fn show(phase: Arc<Phase>, label: &'static str) -> Option<tokio::task::JoinHandle<()>> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tick.tick().await;
            let done = phase.done.load(Ordering::Relaxed);
            let elapsed = Instant::now()
                .saturating_duration_since(phase.start)
                .as_secs_f64();
            let of = phase.total.map(|t| format!("/{t}")).unwrap_or_default();
            let rate = if elapsed > 0.0 {
                done as f64 / elapsed
            } else {
                0.0
            };
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r\x1b[K{label}: {done}{of} calls  {elapsed:.1} s  {rate:.0} calls/s"
            );
            let _ = err.flush();
        }
    }))
}

/// Stops the line and clears it.
pub(crate) fn hide(line: Option<tokio::task::JoinHandle<()>>) {
    if let Some(line) = line {
        line.abort();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K");
        let _ = err.flush();
    }
}
