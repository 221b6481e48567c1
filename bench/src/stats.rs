//! Latency recording without allocation in the measuring loop: a fixed log-linear
//! histogram (HDR-style) per caller, merged when a cell ends.

/// Values below this are kept exactly; above, each power of two is split into this
/// many buckets, so a recorded value is off by at most 1/128 (< 0.8 %).
const SUB: u64 = 128;
const SUB_BITS: u32 = 7;
/// Largest value kept (about 18 minutes in nanoseconds); larger ones are clamped.
const MAX_VALUE: u64 = (1 << 40) - 1;
const BUCKETS: usize = (SUB + (40 - SUB_BITS as u64) * SUB) as usize;

/// Counts of nanosecond values in log-linear buckets, plus exact count, sum, min, max.
#[derive(Clone)]
pub(crate) struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let shift = 63 - v.leading_zeros() - SUB_BITS;
    let sub = (v >> shift) - SUB;
    (SUB + u64::from(shift) * SUB + sub) as usize
}

/// The lowest and highest value that land in bucket `i`.
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB {
        return (i, i);
    }
    let shift = (i - SUB) / SUB;
    let sub = (i - SUB) % SUB;
    let low = (SUB + sub) << shift;
    (low, low + (1 << shift) - 1)
}

impl Histogram {
    /// Records one value in nanoseconds.
    pub(crate) fn record(&mut self, ns: u64) {
        let v = ns.min(MAX_VALUE);
        self.counts[index(v)] += 1;
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Adds another histogram's values to this one.
    pub(crate) fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// Mean in nanoseconds (0 when empty).
    pub(crate) fn mean(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        self.sum as f64 / self.count as f64
    }

    /// Nearest-rank percentile `p` (0–100] in nanoseconds: the middle of the bucket
    /// holding that rank, kept within the exact min and max; the last rank is the
    /// exact max (0 when empty).
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((p / 100.0 * self.count as f64).ceil() as u64).clamp(1, self.count);
        if rank == self.count {
            return self.max as f64;
        }
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bounds(i);
                let mid = (lo + hi) as f64 / 2.0;
                return mid.clamp(self.min as f64, self.max as f64);
            }
        }
        self.max as f64
    }

    /// The cumulative distribution: (upper bound of each non-empty bucket in ns,
    /// fraction of values at or below it), ascending.
    pub(crate) fn cdf(&self) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            if c > 0 {
                seen += c;
                let hi = bounds(i).1.min(self.max);
                out.push((hi as f64, seen as f64 / self.count as f64));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact_and_ranks_are_nearest() {
        let mut h = Histogram::default();
        for v in (1..=100).rev() {
            h.record(v);
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.percentile(50.0), 50.0);
        assert_eq!(h.percentile(99.0), 99.0);
        assert_eq!(h.percentile(99.9), 100.0);
        assert_eq!(h.percentile(100.0), 100.0);
        assert_eq!(h.mean(), 50.5);
    }

    #[test]
    fn large_values_are_within_the_bucket_precision() {
        let mut h = Histogram::default();
        // 1 µs .. 10 s, spread over many decades.
        let values: Vec<u64> = (0..10_000u64).map(|i| 1_000 + i * i * 100).collect();
        for &v in &values {
            h.record(v);
        }
        for p in [1.0, 50.0, 90.0, 99.0, 99.9] {
            let rank = (p / 100.0 * values.len() as f64).ceil() as usize;
            let exact = values[rank - 1] as f64;
            let got = h.percentile(p);
            assert!(
                (got - exact).abs() / exact < 1.0 / 128.0,
                "p{p}: {got} vs {exact}"
            );
        }
        assert_eq!(h.percentile(100.0), *values.last().unwrap() as f64);
    }

    #[test]
    fn every_value_maps_into_its_bucket_bounds() {
        for v in [0, 1, 127, 128, 129, 255, 256, 1_000_000, MAX_VALUE] {
            let (lo, hi) = bounds(index(v));
            assert!(lo <= v && v <= hi, "{v} not in [{lo}, {hi}]");
        }
        assert!(index(MAX_VALUE) < BUCKETS);
    }

    #[test]
    fn merge_and_cdf() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        a.record(10);
        b.record(20);
        b.record(20);
        a.merge(&b);
        assert_eq!(a.cdf(), vec![(10.0, 1.0 / 3.0), (20.0, 1.0)]);
        assert_eq!(a.percentile(50.0), 20.0);
    }
}
