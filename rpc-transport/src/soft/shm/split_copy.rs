//! A large placed copy shared between the thread that places it and one process-wide
//! assistant thread, so that a lone large Read response uses two cores.
//!
//! Why: placing a Read response is the one copy a large message makes between two
//! processes on this link, and while one side copies, the other waits for the bytes.
//! A 4 MiB echo between two processes is two such copies in series with an idle core
//! beside each. Split between two threads, each copy takes about half the time.
//!
//! How: a segment (2 MiB, `rc::responder::SPLIT_PLACE_CHUNK`) of a Read of
//! [`SPLIT_MIN`] bytes or more, when that Read is the only such Read this process is
//! answering ([`LargeRead`]), is cut into [`PIECE`]-sized pieces that both threads
//! claim from one counter until none is left, so the faster one (the caller, while
//! the assistant wakes up) simply does more of them. The caller returns only once
//! the assistant has let go of the copy, so the source memory it reads is the
//! caller's for the whole time, exactly as for a copy made alone. An assistant busy
//! with another copy is not waited for: the caller copies alone. The assistant is
//! started by the first split copy and sleeps on a condition variable between copies
//! (no spinning: a core it spun on is a core other work lacks).
//!
//! The cost is a wake-up of the assistant per segment; a machine whose cores are all
//! busy gains nothing from it, which is why only a lone large Read is split.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use super::direct::{write_range, WriteError};

/// The segments of shorter Reads are copied by the caller alone: the assistant's
/// wake-up (tens of microseconds on a virtual machine) would eat what a Read of one
/// segment saves.
pub(crate) const SPLIT_MIN: usize = 2 * 1024 * 1024;
/// What one claim copies: one `process_vm_writev`.
const PIECE: usize = 128 * 1024;

/// One copy in progress: the caller's range.
#[derive(Clone, Copy)]
struct Job {
    pid: libc::pid_t,
    src: usize,
    len: usize,
    dst: u64,
}

#[derive(Default)]
struct State {
    /// The copy lent to the assistant and not yet taken up by it.
    posted: Option<Job>,
    /// A copy is lent (posted or being worked on) and its caller has not collected it.
    lent: bool,
    /// The assistant has finished its share of the lent copy.
    finished: bool,
    assistant_asleep: bool,
    caller_asleep: bool,
}

struct Assistant {
    state: Mutex<State>,
    work: Condvar,
    done: Condvar,
    /// The next piece to claim, for the copy lent now.
    next: AtomicUsize,
    /// The first failure of either thread (`NONE` while there is none).
    error: AtomicU8,
}

const NONE: u8 = 0;

fn encode(e: WriteError) -> u8 {
    match e {
        WriteError::Gone => 1,
        WriteError::Denied => 2,
        WriteError::BadAddress => 3,
    }
}

fn decode(e: u8) -> Option<WriteError> {
    match e {
        1 => Some(WriteError::Gone),
        2 => Some(WriteError::Denied),
        3 => Some(WriteError::BadAddress),
        _ => None,
    }
}

impl Assistant {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves only flags behind; carry on with them.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims and copies pieces of `job` until none is left or a copy failed.
    fn share(&self, job: &Job) {
        let pieces = job.len.div_ceil(PIECE);
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= pieces || self.error.load(Ordering::Relaxed) != NONE {
                return;
            }
            let at = i * PIECE;
            let n = PIECE.min(job.len - at);
            // SAFETY: `[src + at, + n)` lies in the range the caller of `write`
            // guaranteed readable; that caller waits for this thread to finish before
            // it returns (`Lent::release`), so the range stays live meanwhile.
            let r = unsafe {
                write_range(job.pid, (job.src + at) as *const u8, n, job.dst + at as u64)
            };
            if let Err(e) = r {
                let _ = self.error.compare_exchange(
                    NONE,
                    encode(e),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                return;
            }
        }
    }

    fn run(&self) {
        loop {
            let job = self.next_job();
            self.share(&job);
            let mut g = self.lock();
            g.finished = true;
            let wake = g.caller_asleep;
            drop(g);
            if wake {
                self.done.notify_one();
            }
        }
    }

    /// Sleeps until a copy is posted.
    fn next_job(&self) -> Job {
        let mut g = self.lock();
        loop {
            if let Some(job) = g.posted.take() {
                return job;
            }
            g.assistant_asleep = true;
            g = self.work.wait(g).unwrap_or_else(|p| p.into_inner());
            g.assistant_asleep = false;
        }
    }
}

/// The assistant, started on first use; `None` if its thread could not be started
/// (copies are then made by their callers alone).
fn assistant() -> Option<&'static Assistant> {
    static ASSISTANT: OnceLock<Option<&'static Assistant>> = OnceLock::new();
    *ASSISTANT.get_or_init(|| {
        let a: &'static Assistant = Box::leak(Box::new(Assistant {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
            next: AtomicUsize::new(0),
            error: AtomicU8::new(NONE),
        }));
        std::thread::Builder::new()
            .name("soft-rdma-copy".into())
            .spawn(move || a.run())
            .map_err(|e| tracing::debug!(error = %e, "soft provider: no copy assistant"))
            .ok()
            .map(|_| a)
    })
}

/// Copies `len` bytes at `src` into process `pid` at `dst`, with the assistant's help
/// when it is free (see the module docs).
///
/// # Safety
/// `src..src + len` must be readable memory of this process, live for the call.
pub(crate) unsafe fn write(
    pid: libc::pid_t,
    src: *const u8,
    len: usize,
    dst: u64,
) -> Result<(), WriteError> {
    let Some(lent) = assistant().and_then(|a| lend(a, pid, src, len, dst)) else {
        // SAFETY: the caller's guarantee.
        return unsafe { write_range(pid, src, len, dst) };
    };
    lent.a.share(&lent.job);
    lent.collect()
}

/// Large Reads being answered by placement in this process (see [`LargeRead`]).
static LARGE_READS: AtomicUsize = AtomicUsize::new(0);

/// A Read of [`SPLIT_MIN`] bytes or more whose response this process places, counted
/// while it lives. Only a lone large Read is split: with several in flight the
/// process has copying enough to keep its threads busy, and the assistant would take
/// a core from them (measured: 4 MiB x 16 lost 7-9 % of its calls/s and spent 12-15 %
/// more CPU per call when every large Read was split).
pub(crate) struct LargeRead(());

impl LargeRead {
    /// Counts a Read of `len` bytes if it is large enough to be split.
    pub(crate) fn enter(len: u64) -> Option<LargeRead> {
        (len >= SPLIT_MIN as u64).then(|| {
            LARGE_READS.fetch_add(1, Ordering::Relaxed);
            LargeRead(())
        })
    }

    /// Whether this is the only large Read in flight: its segments may be split.
    pub(crate) fn alone(&self) -> bool {
        LARGE_READS.load(Ordering::Relaxed) == 1
    }
}

impl Drop for LargeRead {
    fn drop(&mut self) {
        LARGE_READS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Posts `job` to the assistant if no other copy holds it.
fn lend(
    a: &'static Assistant,
    pid: libc::pid_t,
    src: *const u8,
    len: usize,
    dst: u64,
) -> Option<Lent> {
    let job = Job {
        pid,
        src: src as usize,
        len,
        dst,
    };
    let mut g = a.lock();
    if g.lent {
        return None;
    }
    a.next.store(0, Ordering::Relaxed);
    a.error.store(NONE, Ordering::Relaxed);
    g.lent = true;
    g.finished = false;
    g.posted = Some(job);
    let wake = g.assistant_asleep;
    drop(g);
    if wake {
        a.work.notify_one();
    }
    Some(Lent { a, job })
}

/// A copy lent to the assistant: dropping it waits until the assistant let go of it.
struct Lent {
    a: &'static Assistant,
    job: Job,
}

impl Lent {
    /// Waits for the assistant's share (taking the copy back if it never started),
    /// then gives the assistant back to other copies. Returns the copy's outcome.
    fn collect(self) -> Result<(), WriteError> {
        let e = self.release();
        std::mem::forget(self);
        match decode(e) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Returns the copy's first failure (`NONE` if none), read before another copy
    /// may be lent and reset it.
    fn release(&self) -> u8 {
        let a = self.a;
        let mut g = a.lock();
        if g.posted.take().is_none() {
            // Taken up: the assistant holds the copy until it says it finished.
            while !g.finished {
                g.caller_asleep = true;
                g = a.done.wait(g).unwrap_or_else(|p| p.into_inner());
                g.caller_asleep = false;
            }
        }
        let e = a.error.load(Ordering::Relaxed);
        g.lent = false;
        e
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // Only on unwinding out of the caller's share: the source must outlive the
        // assistant's reads of it.
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soft::tests::pattern;

    /// Split-copies `len` bytes of `pattern(len, seed)` into a fresh buffer of this
    /// process; whether they arrived byte for byte.
    fn lands_whole(len: usize, seed: u32) -> bool {
        let me = std::process::id() as libc::pid_t;
        let src = pattern(len, seed);
        let mut dst = vec![0u8; len];
        // SAFETY: `src` is live and readable for the call.
        unsafe { write(me, src.as_ptr(), len, dst.as_mut_ptr() as u64) }.unwrap();
        dst == src
    }

    /// Copies land byte for byte, whatever their length's
    /// remainder to a piece, and one after another (the assistant is reused).
    #[test]
    fn split_copies_land_whole() {
        for (k, len) in [PIECE, PIECE + 1, 4 << 20, (3 << 20) + 4093]
            .into_iter()
            .enumerate()
        {
            assert!(lands_whole(len, k as u32), "copy of {len} bytes differs");
        }
    }

    /// Copies from several threads at once: one holds the assistant, the others copy
    /// alone, and every destination gets exactly its source.
    #[test]
    fn concurrent_copies_do_not_mix() {
        std::thread::scope(|s| {
            for t in 0..4u32 {
                s.spawn(move || {
                    for round in 0..8u32 {
                        let len = (1 << 20) + (t * 4096 + round) as usize;
                        let whole = lands_whole(len, t * 100 + round);
                        assert!(whole, "thread {t} round {round} differs");
                    }
                });
            }
        });
    }

    /// A destination the peer does not own fails the whole copy as a bad address,
    /// whichever thread's piece hit it.
    #[test]
    fn a_bad_destination_fails_the_split_copy() {
        let me = std::process::id() as libc::pid_t;
        let src = pattern(2 << 20, 7);
        // SAFETY: `src` is live and readable for the call.
        let r = unsafe { write(me, src.as_ptr(), src.len(), 4096) };
        assert_eq!(r, Err(WriteError::BadAddress));
    }
}
