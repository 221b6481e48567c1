//! gRPC's `grpc-timeout` metadata value, as tonic writes and reads it: at most eight
//! digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
//!
//! A tonic handler learns its deadline only from this entry, and a tonic client sets
//! it with `Request::set_timeout`, so rdma-rpc shows it in the same places: in the
//! client's request metadata after `set_timeout`, and in the handler's. On the wire
//! the deadline travels in the call's frame instead (the entry is not sent).

use std::time::Duration;

use crate::metadata::MetadataMap;

/// The metadata key.
pub(crate) const KEY: &str = "grpc-timeout";

/// The most precise unit that keeps `d` within eight digits, as tonic's.
pub(crate) fn encode(d: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let secs = u128::from(d.as_secs());
    let tries: [(u128, char); 6] = [
        (d.as_nanos(), 'n'),
        (d.as_micros(), 'u'),
        (d.as_millis(), 'm'),
        (secs, 'S'),
        (secs / 60, 'M'),
        (secs / 3600, 'H'),
    ];
    let (value, unit) = tries
        .into_iter()
        .find(|&(v, _)| v <= MAX)
        .unwrap_or((MAX, 'H'));
    format!("{value}{unit}")
}

/// Puts `d` in `metadata` as its `grpc-timeout` entry (replacing one there).
pub(crate) fn insert(metadata: &mut MetadataMap, d: Duration) {
    let value = encode(d).parse().expect("digits and a unit are ASCII");
    metadata.insert(KEY, value);
}

/// The duration `v` names, or `None` if it is not a `grpc-timeout` value.
pub(crate) fn decode(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_tonic_s_and_read_back() {
        let cases = [
            (Duration::from_millis(50), "50000000n"),
            (Duration::from_millis(100), "100000u"),
            (Duration::from_millis(1500), "1500000u"),
            (Duration::from_secs(1000), "1000000m"),
            (Duration::from_secs(100_000_000), "1666666M"),
        ];
        for (d, want) in cases {
            assert_eq!(encode(d), want);
        }
        assert_eq!(decode("100000u"), Some(Duration::from_millis(100)));
        assert_eq!(decode("3S"), Some(Duration::from_secs(3)));
        assert_eq!(decode("2H"), Some(Duration::from_secs(7200)));
        for bad in ["", "S", "123456789S", "12x", "-1S", "1.5S"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
