//! Command-line sizes and durations: `1GiB`, `64KiB`, `4096`; `1ms`, `250us`, `2s`.

use std::time::Duration;

/// Bytes: a number with an optional `KiB`, `MiB` or `GiB` suffix.
pub(crate) fn bytes(s: &str) -> Result<u64, String> {
    let (num, unit) = split(s);
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (B, KiB, MiB, GiB)")),
    };
    let n: u64 = num.parse().map_err(|e| format!("{s:?}: {e}"))?;
    n.checked_mul(scale)
        .ok_or_else(|| format!("{s:?}: too large"))
}

/// A duration: a number with a `us`, `ms` or `s` suffix (no suffix: ms).
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = split(s);
    let n: u64 = num.parse().map_err(|e| format!("{s:?}: {e}"))?;
    match unit {
        "us" => Ok(Duration::from_micros(n)),
        "" | "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        _ => Err(format!("{s:?}: unknown unit {unit:?} (us, ms, s)")),
    }
}

fn split(s: &str) -> (&str, &str) {
    let s = s.trim();
    let at = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (&s[..at], s[at..].trim())
}

/// Bytes as MiB, for printing.
pub(crate) fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}
