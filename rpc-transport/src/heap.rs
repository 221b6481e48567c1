//! Handing freed heap memory back to the kernel.
//!
//! glibc's allocator keeps what a thread frees in that thread's arena, and returns it
//! to the kernel only from the top of the main heap. A server whose thousand RC
//! connections have come and gone keeps tens of megabytes resident that it no longer
//! uses (capacity-probe, 1,000 clients on the soft provider: 10.9 MB before they
//! came, 39.8 MB after they left, 20.5 MB after `malloc_trim(0)`; what then remains is
//! the receive pool's touched slots, kept registered for the next clients).
//! `malloc_trim` also releases whole free pages inside the heaps (`MADV_DONTNEED`).
//! It takes the arenas' locks while it walks them, so callers run it rarely and off
//! the hot path (rpc-core's server: at most once a second after connections close,
//! on a blocking thread).
//!
//! What it cannot hand back: a page that still holds one live chunk, and the chunks
//! in each thread's cache (glibc's tcache: up to 7 freed chunks of each size up to
//! 1 KiB per thread, which `malloc_trim` leaves alone). A cache's bin takes the
//! chunks freed while it has room, so after a burst of closes each size that a
//! closing connection frees leaves up to 7 of that connection's chunks per thread,
//! scattered through the arenas the burst grew, a page each. So what counts is how
//! many distinct sizes a connection frees, not how many chunks. The live chunks are
//! kept few (the soft provider's tables forget dropped QPs first, rpc-core's
//! connection table shrinks as it empties), and so are the connection's own sizes
//! above 128 bytes (smaller sizes are in every thread's cache anyway): its soft
//! RC state lives in the QP's allocation, a call's table entry is 24 bytes, a QP's
//! Read responses are allocated on first use. Limiting glibc's cache to 128 bytes
//! (`GLIBC_TUNABLES=glibc.malloc.tcache_max=128`) had shown what such sizes cost:
//! capacity-probe's server came back to +4 to +5 % of its baseline after one round
//! of 1,000 clients and +6 to +7 % after two, where it stood at +9 to +10 % and +12
//! to +13 %; these changes brought it to +5 to +7 % and +7 to +9 % without the
//! setting (2026-11-30). Burst after burst the caches still scatter what they
//! hold: after eight rounds +9 to +14 % (+19 to +21 % before these changes), flat
//! at +2 to +4 % with the cache off. What remains above 128 bytes is tokio's
//! registration of each socket, the soft send queue's inline buffer and each
//! call's boxed handler future. The caches are the process's, so this library
//! leaves them be. An application that wants its heap back to its baseline after
//! such bursts can run with `GLIBC_TUNABLES=glibc.malloc.tcache_count=0` (every
//! small allocation then takes its arena's lock) or another allocator;
//! capacity-probe shows the difference.
//!
//! Measured and not done (2026-11-30):
//! * Dropping closed connections on a thread that exits (its cache then goes back to
//!   the arenas). Held until the trim and dropped there, they left a burst's server
//!   at +6 to +8 % of its baseline instead of +8 to +14 %, but a churn of one
//!   connection at a time at +8 to +9 % instead of +2 to +4 %: the dead connections
//!   of the held second grew the heap the trim then fragmented. Dropped at once, or
//!   in batches during the burst, they helped neither.
//! * Compacting the tables on a thread that ends before the trim: no change.

/// Returns free heap pages to the kernel where the allocator can (glibc; a no-op
/// elsewhere), and the pages of the soft provider's idle posted receives (see
/// `soft::idle_receives`). First it has the soft provider forget the table entries
/// of dropped QPs and the tables' spare room (`soft::compact`): those small live
/// chunks would otherwise keep whole pages of the heap resident. Costs a walk of the
/// heap and of every soft device, CQ and SRQ: not for a hot path.
pub fn release_free_heap() {
    crate::soft::compact_tables();
    crate::soft::release_idle_receives();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only reads and rearranges the allocator's own free lists
    // under its locks; it frees nothing that is in use and has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}
