//! One cell in a closed loop: `concurrency` callers each make one call after
//! another. Warm-up lasts `warmup` and until as many calls have completed as there
//! are callers (a round, on average: not every caller, as a system that starves some
//! calls would stretch it); then calls completing within the window are recorded
//! (steady state: completions per unit time). The window lasts `duration`, and longer
//! if needed until `min_calls` have completed in it (a 4 MiB call with 256 in flight
//! can outlast a short window). Calls still in flight after it are cancelled (their
//! futures dropped), which every system under test turns into a cancellation.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::stats::Histogram;
use crate::systems::Caller;

/// How long a cell warms up and is measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
    /// Completions the window needs at least (it is extended until then).
    pub(crate) min_calls: u64,
    /// A cell that has not finished by then fails (a stalled system).
    pub(crate) limit: Duration,
    /// Latencies are gaps between a caller's completions (a server stream's
    /// messages): each completion's clock read also starts the next, one read per
    /// message instead of two. The same code for every system of the cell.
    pub(crate) gaps: bool,
}

/// What a cell measured.
pub(crate) struct Measured {
    /// Latency of every call completed in the window, in nanoseconds.
    pub(crate) hist: Histogram,
    /// The window's length.
    pub(crate) elapsed: Duration,
    /// CPU time used in the window by the client process and the server process.
    pub(crate) client_cpu: Duration,
    pub(crate) server_cpu: Duration,
}

/// CPU time so far of (client, server).
pub(crate) type CpuProbe<'a> = &'a mut dyn FnMut() -> Result<(Duration, Duration), String>;

const NOT_YET: u64 = u64::MAX;

struct Shared {
    t0: Instant,
    callers: usize,
    duration_ns: u64,
    min_calls: u64,
    /// Window start in ns since `t0`; `NOT_YET` while warming up.
    from: AtomicU64,
    /// Calls recorded in the window.
    recorded: AtomicU64,
    /// Latest recorded completion, ns since `t0`.
    last: AtomicU64,
    /// Calls completed, window or not (for the warm-up).
    completed: AtomicUsize,
    stop: AtomicBool,
    error: Mutex<Option<String>>,
    /// Something the driver waits for may have happened.
    changed: Notify,
}

impl Shared {
    fn since_t0(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.t0).as_nanos() as u64
    }

    fn failed(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Runs `callers` against one payload and measures them.
pub(crate) async fn closed_loop(
    callers: Vec<Caller>,
    payload: Bytes,
    w: Window,
    cpu: CpuProbe<'_>,
) -> Result<Measured, String> {
    let shared = Arc::new(Shared {
        t0: Instant::now(),
        callers: callers.len(),
        duration_ns: w.duration.as_nanos() as u64,
        min_calls: w.min_calls,
        from: AtomicU64::new(NOT_YET),
        recorded: AtomicU64::new(0),
        last: AtomicU64::new(0),
        completed: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        error: Mutex::new(None),
        changed: Notify::new(),
    });
    // One histogram per caller: it outlives the caller's task, which is aborted
    // mid-call at the end and adds what it recorded as it is dropped.
    let hists: Vec<_> = (0..callers.len())
        .map(|_| Arc::new(Mutex::new(Histogram::default())))
        .collect();
    let tasks: Vec<_> = callers
        .into_iter()
        .zip(&hists)
        .map(|(c, h)| {
            let looped = caller_loop(c, payload.clone(), shared.clone(), h.clone(), w.gaps);
            tokio::spawn(looped)
        })
        .collect();
    let driven = tokio::time::timeout(w.limit, drive(&shared, w, cpu)).await;
    shared.stop.store(true, Ordering::Release);
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        let _ = t.await;
    }
    let (elapsed, client_cpu, server_cpu) =
        driven.map_err(|_| format!("no result within {:?}", w.limit))??;
    let mut hist = Histogram::default();
    for h in &hists {
        hist.merge(&h.lock().unwrap_or_else(|e| e.into_inner()));
    }
    if let Some(e) = shared.failed() {
        return Err(e);
    }
    Ok(Measured {
        hist,
        elapsed,
        client_cpu,
        server_cpu,
    })
}

/// Sequences warm-up, window start and end; returns (window, client CPU, server CPU).
async fn drive(
    sh: &Shared,
    w: Window,
    cpu: CpuProbe<'_>,
) -> Result<(Duration, Duration, Duration), String> {
    tokio::time::sleep(w.warmup).await;
    wait_for(sh, || sh.completed.load(Ordering::Acquire) >= sh.callers).await?;
    let (c0, s0) = cpu()?;
    let from = sh.since_t0(Instant::now());
    sh.from.store(from, Ordering::Release);
    tokio::time::sleep(w.duration).await;
    wait_for(sh, || sh.recorded.load(Ordering::Acquire) >= sh.min_calls).await?;
    let (c1, s1) = cpu()?;
    sh.stop.store(true, Ordering::Release);
    let end = (from + sh.duration_ns).max(sh.last.load(Ordering::Acquire));
    Ok((
        Duration::from_nanos(end - from),
        c1.saturating_sub(c0),
        s1.saturating_sub(s0),
    ))
}

async fn wait_for(sh: &Shared, done: impl Fn() -> bool) -> Result<(), String> {
    loop {
        if let Some(e) = sh.failed() {
            return Err(e);
        }
        if done() {
            return Ok(());
        }
        // A notification sent between the checks and here is kept as a permit.
        sh.changed.notified().await;
    }
}

/// A caller's latencies, recorded without a lock and added to `into` when the
/// caller's future is dropped (its task ended or was aborted mid-call; awaiting the
/// task's handle waits for that).
struct Recorder {
    local: Histogram,
    into: Arc<Mutex<Histogram>>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let mut into = self.into.lock().unwrap_or_else(|e| e.into_inner());
        into.merge(&self.local);
    }
}

/// One caller's loop, recording into `hist`. Nothing here allocates or locks per
/// call.
async fn caller_loop(
    mut caller: Caller,
    payload: Bytes,
    sh: Arc<Shared>,
    hist: Arc<Mutex<Histogram>>,
    gaps: bool,
) {
    let mut rec = Recorder {
        local: Histogram::default(),
        into: hist,
    };
    let mut previous: Option<Instant> = None;
    while !sh.stop.load(Ordering::Acquire) {
        let start = match previous.filter(|_| gaps) {
            Some(end) => end,
            None => Instant::now(),
        };
        if let Err(e) = caller.call(&payload).await {
            sh.error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(e);
            sh.stop.store(true, Ordering::Release);
            sh.changed.notify_one();
            break;
        }
        let end = Instant::now();
        previous = Some(end);
        let from = sh.from.load(Ordering::Acquire);
        // Only the warm-up reads the count (the window starts once it is reached):
        // no shared counter per call after it.
        if from == NOT_YET && sh.completed.fetch_add(1, Ordering::AcqRel) + 1 == sh.callers {
            sh.changed.notify_one();
        }
        let end_ns = sh.since_t0(end);
        if from == NOT_YET || end_ns < from {
            continue;
        }
        let in_window = end_ns <= from + sh.duration_ns;
        // Past the nominal end, completions count only until the minimum is reached.
        let counted = sh
            .recorded
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                (in_window || r < sh.min_calls).then_some(r + 1)
            });
        match counted {
            Ok(r) => {
                let ns = (end - start).as_nanos() as u64;
                rec.local.record(ns);
                if !in_window {
                    sh.last.fetch_max(end_ns, Ordering::AcqRel);
                    if r + 1 >= sh.min_calls {
                        sh.changed.notify_one();
                    }
                }
            }
            Err(_) => break,
        }
    }
}
