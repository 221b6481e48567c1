//! FNV-1a, 64 bit: a checksum both ends of a transfer compute as bytes pass, to
//! show the bytes arrived unchanged (not a defence against tampering).

/// A running FNV-1a hash.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The hash of everything added.
    pub fn value(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_test_vectors_in_any_split() {
        let mut h = Fnv1a::default();
        assert_eq!(h.value(), 0xcbf2_9ce4_8422_2325, "empty input");
        h.update(b"a");
        assert_eq!(h.value(), 0xaf63_dc4c_8601_ec8c);
        let mut whole = Fnv1a::default();
        whole.update(b"foobar");
        let mut split = Fnv1a::default();
        split.update(b"foo");
        split.update(b"bar");
        assert_eq!(whole.value(), 0x8594_4171_f739_67e8);
        assert_eq!(split.value(), whole.value());
    }
}
