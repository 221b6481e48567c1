//! Resident memory of a process, from `/proc/<pid>/status` (VmRSS).

/// VmRSS of `pid` in KiB.
pub(crate) fn rss_kib(pid: u32) -> std::io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no VmRSS in /proc/{pid}/status")))
}

/// KiB as MiB, for printing.
pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A signed difference of two KiB figures, as MiB.
pub(crate) fn mib_delta(now: u64, base: u64) -> f64 {
    (now as f64 - base as f64) / 1024.0
}
