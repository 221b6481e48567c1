//! Maps keyed by small integers (call ids, QP numbers, session ids) on the hot path.
//!
//! SipHash, std's default, costs more per call than everything else a map lookup does
//! here; callgrind showed about 1.5 k instructions per call and side spent hashing.
//! A multiplicative hash is enough for these keys. Call ids are chosen by the peer,
//! but a connection holds at most its credits' worth of calls, so a peer that picks
//! colliding ids slows only its own short table.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by integers, hashed by one multiplication.
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Fibonacci hashing: multiply by 2^64 / φ. hashbrown takes the top bits for its
/// control bytes and the low bits for the bucket, and both mix well this way.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by integer keys; correct (if slower) for anything else.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_spread_over_buckets_and_round_trip() {
        let mut m: IdMap<u32, u32> = IdMap::default();
        for i in 0..10_000u32 {
            m.insert(i, i * 2);
        }
        assert!((0..10_000u32).all(|i| m.get(&i) == Some(&(i * 2))));
        // Consecutive keys must not share their top 7 bits (hashbrown's tag).
        let tag = |k: u32| {
            let mut h = IdHasher::default();
            h.write_u32(k);
            h.finish() >> 57
        };
        let tags: std::collections::HashSet<u64> = (0..64u32).map(tag).collect();
        assert!(tags.len() > 32, "only {} distinct tags", tags.len());
    }
}
