//! Progress on stderr: a bar redrawn in place on a terminal, one line per cell
//! otherwise (logs, CI).

use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Counts finished cells out of a total.
pub(crate) struct Progress {
    total: usize,
    done: usize,
    tty: bool,
    started: Instant,
}

impl Progress {
    pub(crate) fn new(total: usize) -> Progress {
        Progress {
            total,
            done: 0,
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
        }
    }

    /// A cell named `label` starts.
    pub(crate) fn start(&self, label: &str) {
        let mut err = std::io::stderr().lock();
        let elapsed = self.started.elapsed().as_secs();
        if self.tty {
            const WIDTH: usize = 30;
            let filled = WIDTH * self.done / self.total.max(1);
            let _ = write!(
                err,
                "\r\x1b[2K[{}{}] {}/{} {elapsed:>3}s {label}",
                "#".repeat(filled),
                "-".repeat(WIDTH - filled),
                self.done,
                self.total,
            );
        } else {
            let _ = writeln!(err, "[{}/{} {elapsed}s] {label}", self.done + 1, self.total);
        }
        let _ = err.flush();
    }

    /// The cell ended (`error` when it failed).
    pub(crate) fn finish(&mut self, label: &str, error: Option<&str>) {
        self.done += 1;
        let mut err = std::io::stderr().lock();
        if let Some(e) = error {
            let clear = if self.tty { "\r\x1b[2K" } else { "" };
            let _ = writeln!(err, "{clear}{label}: FAILED: {e}");
        }
        if self.tty && self.done == self.total {
            let _ = write!(err, "\r\x1b[2K");
        }
        let _ = err.flush();
    }
}
