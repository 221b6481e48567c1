//! gRPC's connection backoff: how long a channel waits before dialing again after a
//! failed attempt (exponential, with jitter so that many clients do not redial in
//! step).

use std::time::Duration;

use crate::transport::jitter::Jitter;

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
    jitter: Jitter,
}

impl Backoff {
    pub(crate) fn new(cfg: BackoffConfig) -> Self {
        Backoff {
            cfg,
            next: None,
            jitter: Jitter::new(0),
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
        self.jitter.spread(wait, self.cfg.jitter)
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
