//! CPU time of this process (all threads, user + system), by getrusage(2) through
//! nix's safe wrapper.

use std::time::Duration;

use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeValLike;

/// User plus system CPU time used by this process so far.
pub(crate) fn own_cpu() -> Duration {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let us = u.user_time().num_microseconds() + u.system_time().num_microseconds();
            Duration::from_micros(us.max(0) as u64)
        }
        // getrusage(RUSAGE_SELF) cannot fail on Linux; a zero would show as 0 CPU.
        Err(_) => Duration::ZERO,
    }
}
