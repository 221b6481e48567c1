//! Deterministic UD fault injection: loss, duplication and reordering of datagrams.
//!
//! Each datagram draws the same three numbers whatever is decided, so the fault
//! sequence depends on the seed and the datagram count only.

use super::UdFaults;

/// splitmix64: tiny, fast, and good enough to decide faults.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What to do with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Verdict {
    pub(crate) drop: bool,
    pub(crate) duplicate: bool,
    pub(crate) hold: bool,
}

/// The fault state of one device.
pub(crate) struct Faults {
    cfg: UdFaults,
    rng: Rng,
}

impl Faults {
    pub(crate) fn new(cfg: UdFaults) -> Faults {
        Faults {
            cfg,
            rng: Rng::new(cfg.seed),
        }
    }

    /// Whether any fault can happen (lets the send path skip the lock).
    pub(crate) fn active(cfg: &UdFaults) -> bool {
        cfg.loss > 0.0 || cfg.duplicate > 0.0 || cfg.reorder > 0.0
    }

    pub(crate) fn decide(&mut self) -> Verdict {
        let (l, d, r) = (
            self.rng.next_f64(),
            self.rng.next_f64(),
            self.rng.next_f64(),
        );
        let drop = l < self.cfg.loss;
        Verdict {
            drop,
            duplicate: !drop && d < self.cfg.duplicate,
            hold: !drop && r < self.cfg.reorder,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cfg: UdFaults, n: usize) -> Vec<Verdict> {
        let mut f = Faults::new(cfg);
        (0..n).map(|_| f.decide()).collect()
    }

    #[test]
    fn same_seed_same_faults() {
        let cfg = UdFaults {
            loss: 0.3,
            duplicate: 0.2,
            reorder: 0.1,
            seed: 42,
        };
        assert_eq!(run(cfg, 500), run(cfg, 500));
        let other = run(UdFaults { seed: 43, ..cfg }, 500);
        assert_ne!(run(cfg, 500), other);
    }

    #[test]
    fn rates_match_probabilities() {
        let cfg = UdFaults {
            loss: 0.25,
            duplicate: 0.0,
            reorder: 0.5,
            seed: 7,
        };
        let v = run(cfg, 20_000);
        let lost = v.iter().filter(|x| x.drop).count() as f64 / 20_000.0;
        let held = v.iter().filter(|x| x.hold).count() as f64 / 20_000.0;
        assert!((lost - 0.25).abs() < 0.02, "loss rate {lost}");
        // Held only among the ones not dropped: 0.75 * 0.5.
        assert!((held - 0.375).abs() < 0.02, "reorder rate {held}");
        assert!(v.iter().all(|x| !x.duplicate));
        assert!(run(UdFaults::default(), 100)
            .iter()
            .all(|x| *x == Verdict::default()));
    }
}
