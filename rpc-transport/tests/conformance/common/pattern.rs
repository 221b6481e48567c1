//! Recognisable payloads: a wrong offset, a short copy or a swapped message all show.

/// `len` bytes derived from `seed`, different for every seed and position.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed.wrapping_mul(97))
                ^ 0x5a
        })
        .collect()
}
