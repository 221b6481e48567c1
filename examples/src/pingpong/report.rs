//! Output: a readable table with the RDMA/TCP ratio, and the JSON file.

use std::path::Path;

use serde_json::json;

use crate::oob::Params;
use crate::stats::Summary;
use crate::Result;

/// Prints the figures of `key` (the provider: `soft` or `verbs`) next to TCP's.
pub(crate) fn print_table(p: Params, device: &str, key: &str, rdma: &Summary, tcp: &Summary) {
    println!(
        "rdma-pingpong: {} B messages, {} iterations after {} warm-up; streaming window {}; device {device}",
        p.size, p.iters, p.warmup, p.window
    );
    println!(
        "{:<12} {:>14} {:>14} {:>16}",
        "", "rtt p50 (us)", "rtt p99 (us)", "bandwidth (Mb/s)"
    );
    for (name, s) in [(key, rdma), ("tcp", tcp)] {
        println!(
            "{name:<12} {:>14.2} {:>14.2} {:>16.1}",
            s.rtt_p50_us, s.rtt_p99_us, s.mbps
        );
    }
    // Latency ratios below 1 and bandwidth ratios above 1 favour RDMA.
    println!(
        "{:<12} {:>13.2}x {:>13.2}x {:>15.2}x",
        format!("{key}/tcp"),
        rdma.rtt_p50_us / tcp.rtt_p50_us,
        rdma.rtt_p99_us / tcp.rtt_p99_us,
        rdma.mbps / tcp.mbps
    );
}

/// Writes `{"<key>": {...}, "tcp": {...}}` to `path`.
pub(crate) fn write_json(path: &Path, key: &str, rdma: &Summary, tcp: &Summary) -> Result<()> {
    let doc = json!({ key: rdma, "tcp": tcp });
    std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")?;
    Ok(())
}
