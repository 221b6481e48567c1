//! Resident memory figures (KiB, from `examples::child::rss_kib`) as MiB.

/// KiB as MiB, for printing.
pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A signed difference of two KiB figures, as MiB.
pub(crate) fn mib_delta(now: u64, base: u64) -> f64 {
    (now as f64 - base as f64) / 1024.0
}
