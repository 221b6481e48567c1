//! After connections close, the process hands the heap they freed back to the kernel
//! (see `rpc_transport::release_free_heap` for what it returns and what it costs):
//! a server as its clients leave, a client as its channels are dropped.
//!
//! A burst of closes (a thousand connections ending together) costs one trim: the
//! first close in a quiet spell schedules it a second later, and the closes within
//! that second ride on it. One schedule serves the whole process, client and server
//! sides alike. Nothing runs while connections only open and call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long after the first close the trim runs (closes in between share it).
const SETTLE: Duration = Duration::from_secs(1);

static SCHEDULED: AtomicBool = AtomicBool::new(false);

/// Called as a connection ends. Outside a tokio runtime (a connection dropped after
/// its runtime) it does nothing: there is nowhere to wait the second.
pub(super) fn connection_closed() {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if SCHEDULED.swap(true, Ordering::AcqRel) {
        return;
    }
    runtime.spawn(async {
        // Cleared before the trim, so that a close during it schedules the next one,
        // and also if the runtime drops this task while it waits, so that a later
        // runtime's closes still schedule theirs.
        let unschedule = Unschedule;
        tokio::time::sleep(SETTLE).await;
        drop(unschedule);
        let _ = tokio::task::spawn_blocking(rpc_transport::release_free_heap).await;
    });
}

/// Clears `SCHEDULED` when dropped.
struct Unschedule;

impl Drop for Unschedule {
    fn drop(&mut self) {
        SCHEDULED.store(false, Ordering::Release);
    }
}
