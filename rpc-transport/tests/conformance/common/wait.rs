//! Waiting for completions and events: poll with a deadline, never sleep.

use std::time::{Duration, Instant};

use rpc_transport::{AsyncEvent, CompletionQueue, Device, QpState, QueuePair, WorkCompletion};

/// How long any single expected completion or event may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Waits for the next completion on `cq`; `what` names it in the failure message.
pub fn wait_wc(cq: &CompletionQueue, what: &str) -> WorkCompletion {
    wait_wcs(cq, 1, what).remove(0)
}

/// Waits for exactly `n` completions on `cq` (fewer by the deadline fails the test).
pub fn wait_wcs(cq: &CompletionQueue, n: usize, what: &str) -> Vec<WorkCompletion> {
    let start = Instant::now();
    let mut out = Vec::with_capacity(n);
    let mut buf = [WorkCompletion::default(); 16];
    while out.len() < n {
        let want = (n - out.len()).min(buf.len());
        let got = cq
            .poll(&mut buf[..want])
            .unwrap_or_else(|e| panic!("polling for {what}: {e}"));
        out.extend_from_slice(&buf[..got]);
        if got == 0 {
            assert!(
                start.elapsed() < DEADLINE,
                "timed out after {DEADLINE:?} waiting for {what}: got {} of {n} completions: {out:?}",
                out.len()
            );
            // Let the provider's helper (or the peer, on two cores) run.
            std::thread::yield_now();
        }
    }
    out
}

/// Polls `cq` once and returns whatever is there (possibly nothing).
pub fn poll_now(cq: &CompletionQueue) -> Vec<WorkCompletion> {
    let mut buf = [WorkCompletion::default(); 16];
    let n = cq.poll(&mut buf).expect("ibv_poll_cq");
    buf[..n].to_vec()
}

/// Waits for an asynchronous event on `dev` that `want` accepts, returning it; events
/// it does not accept (e.g. `CommEstablished` on verbs) are passed over.
pub fn wait_event(dev: &Device, what: &str, want: impl Fn(&AsyncEvent) -> bool) -> AsyncEvent {
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        match dev.try_async_event() {
            Some(ev) if want(&ev) => return ev,
            Some(ev) => seen.push(ev),
            None => {
                assert!(
                    start.elapsed() < DEADLINE,
                    "timed out after {DEADLINE:?} waiting for {what}; other events: {seen:?}"
                );
                std::thread::yield_now();
            }
        }
    }
}

/// Every asynchronous event pending on `dev` right now.
pub fn drain_events(dev: &Device) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| dev.try_async_event()).collect()
}

/// Waits until `qp` reports state `want`. A QP moves to ERR by itself after an error
/// completion; on verbs the state may change just after the completion is visible.
pub fn wait_state(qp: &QueuePair, want: QpState, what: &str) {
    let start = Instant::now();
    loop {
        let now = qp.state();
        if now == want {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting for {what}: QP {} is {now:?}, expected {want:?}",
            qp.qp_num()
        );
        std::thread::yield_now();
    }
}
