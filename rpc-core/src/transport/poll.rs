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
/// server in one process over the soft provider (`tests/tests/perf.rs`, release; the
/// machine is shared with other builds, load average 2–9, so treat these as rough):
///
/// | mode | 1 in flight | p50 / p99 | 256 in flight | 64 MiB echo |
/// | --- | --- | --- | --- | --- |
/// | `Busy` | 2.5–3.5 k calls/s | 19–24 µs / 5–8 ms | 52–80 k calls/s | 2.4–3.3 s |
/// | `Adaptive(200 µs)` | 5.3–6.4 k calls/s | 24–29 µs / 0.7–0.8 ms | 80–91 k calls/s | 0.8–1.2 s |
/// | `Event` | 25–28 k calls/s | 24–28 µs / 0.22–0.27 ms | 95–103 k calls/s | 0.8–1.0 s |
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
/// `drained`: the caller's last poll returned fewer completions than `wc` holds, so
/// the CQ was empty then and an event-driven wait can arm at once instead of polling
/// first (every futile poll of the soft provider is a `recv` per connection).
pub(crate) async fn wait(
    cq: &CompletionQueue,
    mode: CompletionMode,
    wc: &mut [WorkCompletion],
    kick: &tokio::sync::Notify,
    drained: bool,
) -> rpc_transport::Result<usize> {
    let spin = match mode {
        CompletionMode::Busy => None,
        CompletionMode::Event => {
            return tokio::select! {
                r = async {
                    if drained { cq.wait_async(wc).await } else { cq.poll_async(wc).await }
                } => r,
                () = kick.notified() => Ok(0),
            };
        }
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
        r = cq.wait_async(wc) => r,
        () = kick.notified() => Ok(0),
    }
}
