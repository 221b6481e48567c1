//! How a driver waits for completions.

use std::time::{Duration, Instant};

use rpc_transport::{CompletionQueue, WorkCompletion};

/// How completions are reaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionMode {
    /// Poll the CQ in a loop, yielding to tokio between polls: lowest latency, one
    /// core busy per connection (client) or per server while it runs.
    Busy,
    /// Sleep on the CQ's completion channel under tokio when it is empty: no CPU
    /// while idle, one wake-up per burst.
    Event,
    /// Busy-poll for this long after the last completion, then sleep as `Event`:
    /// near-busy latency under load, idle cost of `Event`.
    Adaptive(Duration),
}

/// `Event` by default. Measured on the 2-core development machine with client and
/// server in one process over the soft provider (`tests/tests/perf.rs`, release):
///
/// | mode | 1 in flight | p50 / p99 | 256 in flight | 64 MiB echo |
/// | --- | --- | --- | --- | --- |
/// | `Busy` | 2.5 k calls/s | 24 µs / 8.0 ms | 80 k calls/s | 2.4 s |
/// | `Adaptive(200 µs)` | 5.3 k calls/s | 29 µs / 0.8 ms | 80 k calls/s | 0.80 s |
/// | `Event` | 27.7 k calls/s | 28 µs / 0.22 ms | 95 k calls/s | 0.81 s |
///
/// Spinning pollers take the cores the callers, handlers and the soft provider need;
/// `Busy` pays off only with a core to spare per poller.
impl Default for CompletionMode {
    fn default() -> Self {
        CompletionMode::Event
    }
}

/// Waits for completions into `wc` by `mode`, returning early with 0 when `kick` is
/// notified (someone has work for the driver that no completion will announce).
pub(crate) async fn wait(
    cq: &CompletionQueue,
    mode: CompletionMode,
    wc: &mut [WorkCompletion],
    kick: &tokio::sync::Notify,
) -> rpc_transport::Result<usize> {
    let spin = match mode {
        CompletionMode::Busy => None,
        CompletionMode::Event => Some(Duration::ZERO),
        CompletionMode::Adaptive(d) => Some(d),
    };
    let start = Instant::now();
    loop {
        let n = cq.poll(wc)?;
        if n > 0 {
            return Ok(n);
        }
        match spin {
            Some(d) if start.elapsed() >= d => break,
            _ => {
                // A kick already pending must not wait for the next completion.
                let notified = kick.notified();
                tokio::pin!(notified);
                if notified.as_mut().enable() {
                    return Ok(0);
                }
                tokio::task::yield_now().await;
            }
        }
    }
    tokio::select! {
        r = cq.poll_async(wc) => r,
        () = kick.notified() => Ok(0),
    }
}
