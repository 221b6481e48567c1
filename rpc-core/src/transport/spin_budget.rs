//! How long a poller spins before it sleeps, learned from what its spins found.
//!
//! Spinning pays only while the peer runs on another core. When the cores are
//! oversubscribed (more runnable threads than cores: other jobs, or client and
//! server on one core), a spinning poller holds the core its peer needs, and the
//! reply it waits for can only come after it gives up and sleeps: every hop then
//! costs a whole spin. Measured with `rpc-bench`, 32 B, one in flight, two
//! processes on 2 cores with three busy loops beside them: unary p50 115 µs and
//! bidi ping-pong p50 118 µs with a 50 µs spin, against 10 µs and 13 µs when
//! sleeping at once (`CompletionMode::Event`).
//!
//! So a spin that missed, followed by a completion soon after the poller slept
//! (within the configured spin: spinning on might have caught it, had it not held
//! the core), counts against spinning; after two such misses in a row the spin
//! halves, down to none. A spin that found a completion doubles it again (up to
//! the configured one). While it is none, one wait in [`PROBE_EVERY`] spins in full,
//! so that a machine that is no longer oversubscribed gets its spinning back. A
//! long sleep (the peer was idle) teaches nothing. State is a few relaxed atomics:
//! a budget may be shared by the tasks that take turns at one CQ.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// While spinning is off, one wait in this many spins in full.
pub(crate) const PROBE_EVERY: u32 = 128;
/// Below this a spin is not worth its clock reads: off.
const MIN_SPIN_NS: u32 = 1_000;
/// Misses in a row that halve the spin.
const MISSES_TO_HALVE: u32 = 2;

/// A poller's spin length, between none and the completion mode's.
#[derive(Debug)]
pub(crate) struct SpinBudget {
    full_ns: u32,
    now_ns: AtomicU32,
    misses: AtomicU32,
    /// Waits since spinning went off (for the probe).
    off_waits: AtomicU32,
}

impl SpinBudget {
    /// Starts at `full`, the completion mode's spin.
    pub(crate) fn new(full: Duration) -> SpinBudget {
        let full_ns = u32::try_from(full.as_nanos()).unwrap_or(u32::MAX);
        SpinBudget {
            full_ns,
            now_ns: AtomicU32::new(full_ns),
            misses: AtomicU32::new(0),
            off_waits: AtomicU32::new(0),
        }
    }

    /// How long this wait may spin.
    pub(crate) fn spin(&self) -> Duration {
        let now = self.now_ns.load(Ordering::Relaxed);
        if now > 0 {
            return Duration::from_nanos(now.into());
        }
        let waits = self.off_waits.load(Ordering::Relaxed).wrapping_add(1);
        self.off_waits.store(waits, Ordering::Relaxed);
        if waits.is_multiple_of(PROBE_EVERY) {
            Duration::from_nanos(self.full_ns.into())
        } else {
            Duration::ZERO
        }
    }

    /// The spin found a completion.
    pub(crate) fn found(&self) {
        self.misses.store(0, Ordering::Relaxed);
        let now = self.now_ns.load(Ordering::Relaxed);
        if now < self.full_ns {
            // From off (a probe that found one): straight back to full.
            let next = if now == 0 {
                self.full_ns
            } else {
                now.saturating_mul(2)
            };
            self.now_ns.store(next.min(self.full_ns), Ordering::Relaxed);
        }
    }

    /// The spin (of length `spun`, none while off) found nothing, and the poller
    /// then slept for `slept` before a completion woke it.
    pub(crate) fn missed(&self, spun: Duration, slept: Duration) {
        if spun.is_zero() || slept.as_nanos() >= u128::from(self.full_ns) {
            // Sleeping at once, or the peer was idle: nothing learned.
            return;
        }
        let misses = self.misses.load(Ordering::Relaxed) + 1;
        if misses < MISSES_TO_HALVE {
            self.misses.store(misses, Ordering::Relaxed);
            return;
        }
        self.misses.store(0, Ordering::Relaxed);
        let half = self.now_ns.load(Ordering::Relaxed) / 2;
        self.now_ns
            .store(if half < MIN_SPIN_NS { 0 } else { half }, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: Duration = Duration::from_micros(50);
    const SHORT: Duration = Duration::from_micros(10);

    fn off_after_misses(b: &SpinBudget) -> usize {
        let mut n = 0;
        // Not `spin()`: while off, each call counts towards the probe.
        while b.now_ns.load(Ordering::Relaxed) > 0 {
            b.missed(b.spin(), SHORT);
            n += 1;
            assert!(n < 100, "the spin never went off");
        }
        n
    }

    #[test]
    fn misses_followed_by_a_quick_completion_turn_spinning_off() {
        let b = SpinBudget::new(FULL);
        assert_eq!(b.spin(), FULL);
        b.missed(FULL, SHORT);
        assert_eq!(b.spin(), FULL, "one miss is not a pattern");
        b.missed(FULL, SHORT);
        assert_eq!(b.spin(), FULL / 2);
        // 25 → 12.5 → 6.25 → 3.1 → 1.6 → off: two misses each.
        assert_eq!(off_after_misses(&b), 10);
    }

    #[test]
    fn a_long_sleep_or_a_found_completion_keeps_spinning() {
        let b = SpinBudget::new(FULL);
        for _ in 0..10 {
            b.missed(FULL, Duration::from_millis(5));
        }
        assert_eq!(b.spin(), FULL, "an idle peer says nothing about the cores");
        b.missed(FULL, SHORT);
        b.found();
        b.missed(FULL, SHORT);
        assert_eq!(b.spin(), FULL, "a find in between resets the misses");
    }

    #[test]
    fn a_probe_that_finds_a_completion_brings_the_full_spin_back() {
        let b = SpinBudget::new(FULL);
        off_after_misses(&b);
        let spins: Vec<Duration> = (0..PROBE_EVERY).map(|_| b.spin()).collect();
        assert_eq!(spins.iter().filter(|s| !s.is_zero()).count(), 1);
        assert_eq!(spins.last(), Some(&FULL), "the probe spins in full");
        b.found();
        assert_eq!(b.spin(), FULL);
    }

    #[test]
    fn a_probe_that_misses_leaves_spinning_off() {
        let b = SpinBudget::new(FULL);
        off_after_misses(&b);
        for _ in 0..3 * PROBE_EVERY {
            let s = b.spin();
            b.missed(s, SHORT);
        }
        assert!((0..PROBE_EVERY - 1).all(|_| b.spin().is_zero()));
    }

    #[test]
    fn finds_double_a_halved_spin_up_to_the_full_one() {
        let b = SpinBudget::new(FULL);
        b.missed(FULL, SHORT);
        b.missed(FULL, SHORT);
        b.missed(FULL / 2, SHORT);
        b.missed(FULL / 2, SHORT);
        assert_eq!(b.spin(), FULL / 4);
        b.found();
        assert_eq!(b.spin(), FULL / 2);
        b.found();
        b.found();
        assert_eq!(b.spin(), FULL);
    }
}
