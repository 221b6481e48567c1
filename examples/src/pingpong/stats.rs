//! Turning raw samples into the reported figures.

use std::time::Duration;

use serde::Serialize;

/// What one transport achieved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Summary {
    pub(crate) rtt_p50_us: f64,
    pub(crate) rtt_p99_us: f64,
    pub(crate) mbps: f64,
}

impl Summary {
    /// Percentiles of `rtts` (which get sorted), and `bytes` streamed in `elapsed`.
    pub(crate) fn new(rtts: &mut [Duration], bytes: u64, elapsed: Duration) -> Summary {
        rtts.sort_unstable();
        Summary {
            rtt_p50_us: micros(percentile(rtts, 50.0)),
            rtt_p99_us: micros(percentile(rtts, 99.0)),
            mbps: bytes as f64 * 8.0 / elapsed.as_secs_f64() / 1e6,
        }
    }
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut v: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        let s = Summary::new(&mut v, 125_000, Duration::from_secs(1));
        assert_eq!(s.rtt_p50_us, 50.0);
        assert_eq!(s.rtt_p99_us, 99.0);
        assert_eq!(s.mbps, 1.0);
    }
}
