//! gRPC's connection backoff: how long a channel waits before dialing again after a
//! failed attempt (exponential, with jitter so that many clients do not redial in
//! step).

use std::time::Duration;

/// Backoff settings (gRPC's connection-backoff names; defaults on [`Backoff::default`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BackoffConfig {
    /// Wait after the first failed attempt.
    pub(crate) base: Duration,
    /// Growth of the wait per further failure.
    pub(crate) multiplier: f64,
    /// Each wait is randomised by ± this fraction.
    pub(crate) jitter: f64,
    /// Longest wait.
    pub(crate) max: Duration,
}

impl Default for BackoffConfig {
    /// 100 ms, ×1.6, ±20 %, at most 3 s. gRPC's defaults (1 s up to 120 s) are for
    /// wide-area clients; an RDMA fabric is one datacenter, where a restarted server
    /// is back in seconds and a caller should not wait minutes to notice.
    fn default() -> Self {
        BackoffConfig {
            base: Duration::from_millis(100),
            multiplier: 1.6,
            jitter: 0.2,
            max: Duration::from_secs(3),
        }
    }
}

/// The backoff state of one channel.
#[derive(Debug)]
pub(crate) struct Backoff {
    cfg: BackoffConfig,
    /// The next wait before jitter; `None` until a failure.
    next: Option<Duration>,
    rng: u64,
}

impl Backoff {
    pub(crate) fn new(cfg: BackoffConfig) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Backoff {
            cfg,
            next: None,
            rng: seed | 1,
        }
    }

    /// A connection came up: the next failure waits `base` again.
    pub(crate) fn reset(&mut self) {
        self.next = None;
    }

    /// An attempt failed: how long to wait before the next one.
    pub(crate) fn failed(&mut self) -> Duration {
        let wait = self.next.unwrap_or(self.cfg.base).min(self.cfg.max);
        self.next = Some(wait.mul_f64(self.cfg.multiplier).min(self.cfg.max));
        // xorshift64: enough to spread clients apart, no dependency for it.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let unit = (self.rng >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
        wait.mul_f64(1.0 + self.cfg.jitter * (2.0 * unit - 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_by_the_multiplier_within_jitter_up_to_the_max_and_reset() {
        let cfg = BackoffConfig::default();
        let mut b = Backoff::new(cfg);
        let mut expect = cfg.base;
        for _ in 0..12 {
            let w = b.failed().as_secs_f64();
            let e = expect.as_secs_f64();
            assert!(w >= e * 0.8 - 1e-9 && w <= e * 1.2 + 1e-9, "{w} vs {e}");
            expect = expect.mul_f64(cfg.multiplier).min(cfg.max);
        }
        assert_eq!(expect, cfg.max);
        b.reset();
        assert!(b.failed() <= cfg.base.mul_f64(1.2));
    }
}
