//! Bytes this thread copied for RC peers inside progress passes (placed Read
//! responses, loans taken): what a spinning poller needs to tell its own polls'
//! work from waiting (rpc-core's `SpinClock`). A placed 256 KiB Read takes a
//! poll some 20 µs, which counted as spinning ended a 50 µs spin before the
//! reply it waited for.

use std::cell::Cell;

thread_local! {
    static COPIED: Cell<u64> = const { Cell::new(0) };
}

/// Counts `n` bytes copied by this thread for a peer.
pub(crate) fn add(n: usize) {
    COPIED.with(|c| c.set(c.get().wrapping_add(n as u64)));
}

/// Bytes this thread has copied for RC peers of soft devices inside progress
/// passes (a wrapping count): a poll after which it changed did work of its own,
/// however long it took. Always 0 on verbs devices, whose NIC does that work.
pub fn copied_for_peers() -> u64 {
    COPIED.with(Cell::get)
}
