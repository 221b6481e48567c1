//! After connections close, the server hands the heap they freed back to the kernel
//! (see `rpc_transport::release_free_heap` for what it returns and what it costs).
//!
//! A burst of closes (a thousand clients leaving together) costs one trim: the first
//! close in a quiet spell schedules it a second later, and the closes within that
//! second ride on it. Nothing runs while connections only open and call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long after the first close the trim runs (closes in between share it).
const SETTLE: Duration = Duration::from_secs(1);

static SCHEDULED: AtomicBool = AtomicBool::new(false);

/// Called as a connection's task ends (from inside the server's runtime).
pub(super) fn connection_closed() {
    if SCHEDULED.swap(true, Ordering::AcqRel) {
        return;
    }
    tokio::spawn(async {
        tokio::time::sleep(SETTLE).await;
        // Cleared first: a close during the trim schedules the next one.
        SCHEDULED.store(false, Ordering::Release);
        let _ = tokio::task::spawn_blocking(rpc_transport::release_free_heap).await;
    });
}
