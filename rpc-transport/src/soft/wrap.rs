//! Ring indices without a division: a `%` by a length that is not a constant is an
//! integer division (tens of cycles), and the send queue and the CQ ring step theirs
//! several times per message.

/// `i` wrapped into `0..len`, for `i < 2 * len` (an index plus an offset, each
/// below `len`).
#[inline]
pub(crate) fn wrap(i: usize, len: usize) -> usize {
    debug_assert!(i < 2 * len, "{i} is not below twice {len}");
    if i >= len {
        i - len
    } else {
        i
    }
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn wraps_like_the_remainder_below_twice_the_length() {
        for len in [1, 2, 3, 7, 128, 129] {
            for i in 0..2 * len {
                assert_eq!(wrap(i, len), i % len, "{i} in {len}");
            }
        }
    }
}
