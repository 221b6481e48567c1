//! Randomised waits, so that many peers that started together do not act in step
//! (clients redialling after a restart, connections retiring at their maximum age).
//! A xorshift generator seeded from the clock: spreading peers apart needs no more.

use std::time::Duration;

/// A small random source, one per user (no locking, no dependency).
#[derive(Debug, Clone)]
pub(crate) struct Jitter(u64);

impl Jitter {
    /// Seeded from the clock and `salt` (something that differs between users
    /// started in the same instant, e.g. a peer's port).
    pub(crate) fn new(salt: u64) -> Jitter {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Jitter((now ^ salt.rotate_left(32)) | 1)
    }

    /// A uniform draw in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        // xorshift64
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `d` randomised by ± `fraction` of itself.
    pub(crate) fn spread(&mut self, d: Duration, fraction: f64) -> Duration {
        d.mul_f64(1.0 + fraction * (2.0 * self.unit() - 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_within_the_fraction_and_vary() {
        let mut j = Jitter::new(7);
        let d = Duration::from_secs(10);
        let draws: Vec<Duration> = (0..1000).map(|_| j.spread(d, 0.1)).collect();
        assert!(draws
            .iter()
            .all(|w| *w >= Duration::from_secs(9) && *w <= Duration::from_secs(11)));
        let lo = draws.iter().filter(|w| **w < d).count();
        assert!((300..700).contains(&lo), "{lo} of 1000 below the middle");
    }
}
