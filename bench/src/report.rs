//! The figures of a run: JSON (every figure) and the table (with ratios against the
//! baselines measured in the same run).

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::runner::Measured;
use crate::system::System;
use crate::workload::Workload;

/// One measured cell. The first ten fields are the documented JSON shape. Streaming
/// rows fill the same fields, counting one message as one call: `server_stream`'s
/// and `client_stream`'s `calls_per_s` is messages/s over all their streams and
/// their latencies are the gaps between consecutive messages of one stream (read by
/// the client, or taken by the client stream); `bidi_pingpong`'s are round trips.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Run {
    pub(crate) system: &'static str,
    pub(crate) workload: &'static str,
    pub(crate) payload_bytes: usize,
    pub(crate) concurrency: usize,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) p999_us: f64,
    pub(crate) calls_per_s: f64,
    /// Payload megabytes (10^6) per second, one direction (the echo carries as many back).
    pub(crate) mb_per_s: f64,
    /// Client plus server CPU time per call.
    pub(crate) cpu_us_per_call: f64,
    pub(crate) client_cpu_us_per_call: f64,
    pub(crate) server_cpu_us_per_call: f64,
    pub(crate) mean_us: f64,
    pub(crate) max_us: f64,
    pub(crate) calls: u64,
    pub(crate) window_s: f64,
    /// This run's figures divided by tonic's in the same cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) vs_tonic: Option<Ratios>,
    /// This run's figures divided by the raw TCP loop's in the same cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) vs_tcp: Option<Ratios>,
}

/// Quotients against a baseline: below 1 is better for latency and CPU, above 1 for
/// calls/s (and MB/s, which has the same ratio).
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Ratios {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
    pub(crate) calls_per_s: f64,
    pub(crate) cpu_per_call: f64,
}

/// A cell that did not produce figures, and why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Failure {
    pub(crate) system: &'static str,
    pub(crate) workload: &'static str,
    pub(crate) payload_bytes: usize,
    pub(crate) concurrency: usize,
    pub(crate) error: String,
}

/// Everything written by `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) runs: Vec<Run>,
    pub(crate) errors: Vec<Failure>,
    /// With `server_stream`: what one message costs with no transport, per stream
    /// size, and the ceiling it puts on one stream (`floor`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) stream_floor: Vec<crate::floor::Floor>,
    pub(crate) warmup_s: f64,
    pub(crate) duration_s: f64,
    pub(crate) provider: String,
    /// What carried rdma-rpc's queue pairs: the soft provider's link ("shm", "tcp" or
    /// a mix, from its counters), or "verbs" (see `link::rdma_link`).
    pub(crate) link: String,
    /// Worker threads of each process's tokio runtime (client and servers alike):
    /// tokio's default, one per core, or `TOKIO_WORKER_THREADS`, which the servers
    /// inherit. Both processes share the host, so on a small one this decides how
    /// far they oversubscribe its cores.
    pub(crate) workers: usize,
    pub(crate) wall_s: f64,
}

fn us(ns: f64) -> f64 {
    ns / 1e3
}

impl Run {
    /// The figures of one cell.
    pub(crate) fn new(
        system: System,
        workload: Workload,
        payload: usize,
        concurrency: usize,
        m: &Measured,
    ) -> Run {
        let calls = m.hist.count();
        let secs = m.elapsed.as_secs_f64();
        let per_call = |d: Duration| {
            if calls == 0 {
                0.0
            } else {
                d.as_secs_f64() * 1e6 / calls as f64
            }
        };
        let calls_per_s = if secs > 0.0 { calls as f64 / secs } else { 0.0 };
        Run {
            system: system.name(),
            workload: workload.name(),
            payload_bytes: payload,
            concurrency,
            p50_us: us(m.hist.percentile(50.0)),
            p99_us: us(m.hist.percentile(99.0)),
            p999_us: us(m.hist.percentile(99.9)),
            calls_per_s,
            mb_per_s: calls_per_s * payload as f64 / 1e6,
            cpu_us_per_call: per_call(m.client_cpu + m.server_cpu),
            client_cpu_us_per_call: per_call(m.client_cpu),
            server_cpu_us_per_call: per_call(m.server_cpu),
            mean_us: us(m.hist.mean()),
            max_us: us(m.hist.percentile(100.0)),
            calls,
            window_s: secs,
            vs_tonic: None,
            vs_tcp: None,
        }
    }

    fn ratios(&self, base: &Run) -> Ratios {
        let q = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        Ratios {
            p50: q(self.p50_us, base.p50_us),
            p99: q(self.p99_us, base.p99_us),
            p999: q(self.p999_us, base.p999_us),
            calls_per_s: q(self.calls_per_s, base.calls_per_s),
            cpu_per_call: q(self.cpu_us_per_call, base.cpu_us_per_call),
        }
    }
}

/// Fills every run's ratios against tonic and tcp in the same cell (where measured).
pub(crate) fn add_ratios(runs: &mut [Run]) {
    let find = |runs: &[Run], sys: System, r: &Run| {
        cell_of(runs, sys, r.workload, r.payload_bytes, r.concurrency).cloned()
    };
    for i in 0..runs.len() {
        let tonic = find(runs, System::Tonic, &runs[i]);
        let tcp = find(runs, System::Tcp, &runs[i]);
        runs[i].vs_tonic = tonic.map(|b| runs[i].ratios(&b));
        runs[i].vs_tcp = tcp.map(|b| runs[i].ratios(&b));
    }
}

/// `system`'s row of the cell (`workload`, payload, concurrency), if it ran.
pub(crate) fn cell_of<'a>(
    runs: &'a [Run],
    system: System,
    workload: &str,
    payload_bytes: usize,
    concurrency: usize,
) -> Option<&'a Run> {
    runs.iter().find(|r| {
        r.system == system.name()
            && r.workload == workload
            && r.payload_bytes == payload_bytes
            && r.concurrency == concurrency
    })
}

/// `32 B`, `1 KiB`, `4 MiB`.
pub(crate) fn size_label(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

fn ratio(r: Option<f64>) -> String {
    match r {
        Some(x) if x.is_finite() => format!("{x:.2}"),
        _ => "-".into(),
    }
}

/// The rows of `workload`, in run order.
fn rows_of(runs: &[Run], workload: Workload) -> Vec<&Run> {
    runs.iter()
        .filter(|r| r.workload == workload.name())
        .collect()
}

/// The human-readable tables of the unary and the upload cells, then every failed
/// cell.
pub(crate) fn table(runs: &[Run], errors: &[Failure]) -> String {
    let mut s = String::new();
    for workload in [Workload::Unary, Workload::Upload] {
        let rows = rows_of(runs, workload);
        if rows.is_empty() {
            continue;
        }
        if workload == Workload::Upload {
            let _ = writeln!(
                s,
                "\nupload: the payload one way (the reply carries only its length)"
            );
        }
        call_table(&mut s, &rows);
    }
    s + &failures(errors)
}

/// One table of call cells (unary or upload), with ratios against the baselines.
fn call_table(s: &mut String, rows: &[&Run]) {
    let _ = writeln!(
        s,
        "{:>7} {:>4} {:<11} {:>9} {:>9} {:>9} {:>10} {:>8} {:>8} | {:>6} {:>6} {:>7} {:>6} | {:>6} {:>7}",
        "payload", "conc", "system", "p50 µs", "p99 µs", "p99.9 µs", "calls/s", "MB/s",
        "CPU µs", "p50", "p99", "calls/s", "CPU", "p50", "calls/s",
    );
    let _ = writeln!(
        s,
        "{:>83} | {:^29} | {:^14}",
        "(CPU: client+server per call)", "÷ tonic (same cell)", "÷ tcp"
    );
    let mut last = None;
    for r in rows {
        let cell = (r.payload_bytes, r.concurrency);
        if last.is_some_and(|l| l != cell) {
            s.push('\n');
        }
        last = Some(cell);
        let t = r.vs_tonic;
        let c = r.vs_tcp;
        let _ = writeln!(
            s,
            "{:>7} {:>4} {:<11} {:>9.1} {:>9.1} {:>9.1} {:>10.0} {:>8.1} {:>8.1} | {:>6} {:>6} {:>7} {:>6} | {:>6} {:>7}",
            size_label(r.payload_bytes),
            r.concurrency,
            r.system,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.calls_per_s,
            r.mb_per_s,
            r.cpu_us_per_call,
            ratio(t.map(|x| x.p50)),
            ratio(t.map(|x| x.p99)),
            ratio(t.map(|x| x.calls_per_s)),
            ratio(t.map(|x| x.cpu_per_call)),
            ratio(c.map(|x| x.p50)),
            ratio(c.map(|x| x.calls_per_s)),
        );
    }
}

fn failures(errors: &[Failure]) -> String {
    let mut s = String::new();
    for e in errors {
        let _ = writeln!(
            s,
            "FAILED {} {} {} x{}: {}",
            e.system,
            e.workload,
            size_label(e.payload_bytes),
            e.concurrency,
            e.error
        );
    }
    s
}

/// The streaming cells, with ratios against tonic's same cell.
pub(crate) fn stream_table(runs: &[Run]) -> String {
    let mut s = String::new();
    for workload in [
        Workload::ServerStream,
        Workload::ClientStream,
        Workload::BidiPingpong,
    ] {
        let rows = rows_of(runs, workload);
        if rows.is_empty() {
            continue;
        }
        let (what, lat) = match workload {
            Workload::ServerStream | Workload::ClientStream => ("streams", "gap"),
            _ => ("streams", "rtt"),
        };
        let _ = writeln!(
            s,
            "\n{workload}: latencies are {}",
            match workload {
                Workload::ServerStream => "gaps between messages of one stream",
                Workload::ClientStream => "gaps between messages the stream took",
                _ => "round trips (send one, read one)",
            }
        );
        let _ = writeln!(
            s,
            "{:>7} {:>7} {:<11} {:>10} {:>8} {:>9} {:>9} {:>9} {:>8} | {:>7} {:>6} {:>6} {:>6}",
            "message",
            what,
            "system",
            "msgs/s",
            "MB/s",
            &format!("{lat} p50"),
            "p99 µs",
            "p99.9 µs",
            "CPU µs",
            "msgs/s",
            "p50",
            "p99",
            "CPU",
        );
        let _ = writeln!(
            s,
            "{:>85} | {:^29}",
            "(p50 in µs; CPU: client+server per message)", "÷ tonic (same cell)"
        );
        for r in rows {
            let t = r.vs_tonic;
            let _ = writeln!(
                s,
                "{:>7} {:>7} {:<11} {:>10.0} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>8.2} | {:>7} {:>6} {:>6} {:>6}",
                size_label(r.payload_bytes),
                r.concurrency,
                r.system,
                r.calls_per_s,
                r.mb_per_s,
                r.p50_us,
                r.p99_us,
                r.p999_us,
                r.cpu_us_per_call,
                ratio(t.map(|x| x.calls_per_s)),
                ratio(t.map(|x| x.p50)),
                ratio(t.map(|x| x.p99)),
                ratio(t.map(|x| x.cpu_per_call)),
            );
        }
    }
    s
}

/// The footer naming the systems each workload skipped, and why: the streaming
/// workloads on one line (they skip the same systems), the upload on its own.
pub(crate) fn skipped_note(workloads: &[Workload], systems: &[System]) -> String {
    let streaming: Vec<Workload> = workloads
        .iter()
        .copied()
        .filter(|w| w.is_streaming())
        .collect();
    let upload: Vec<Workload> = workloads
        .iter()
        .copied()
        .filter(|&w| w == Workload::Upload)
        .collect();
    let groups = [
        (
            streaming,
            "no streaming calls: the TCP loops have none, UD carries none, tonic-uds is a unary baseline",
        ),
        (upload, "the TCP loops only echo"),
    ];
    let mut s = String::new();
    for (group, why) in groups {
        let Some(&first) = group.first() else {
            continue;
        };
        let skipped: Vec<&str> = systems
            .iter()
            .filter(|&&sys| !first.runs_on(sys))
            .map(|sys| sys.name())
            .collect();
        if skipped.is_empty() {
            continue;
        }
        let names: Vec<&str> = group.iter().map(|w| w.name()).collect();
        let _ = writeln!(
            s,
            "skipped for {}: {} ({why})",
            names.join(", "),
            skipped.join(", ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(system: System, p50: f64, cps: f64) -> Run {
        Run {
            system: system.name(),
            workload: "unary",
            payload_bytes: 32,
            concurrency: 1,
            p50_us: p50,
            p99_us: p50,
            p999_us: p50,
            calls_per_s: cps,
            mb_per_s: 0.0,
            cpu_us_per_call: 10.0,
            client_cpu_us_per_call: 5.0,
            server_cpu_us_per_call: 5.0,
            mean_us: p50,
            max_us: p50,
            calls: 1,
            window_s: 1.0,
            vs_tonic: None,
            vs_tcp: None,
        }
    }

    /// rdma-rpc and tonic in a unary cell (p50 10 and 50 µs, 4,000 and 1,000
    /// calls/s), then in a cell of `workload` with `second`'s (p50, calls/s); with
    /// their ratios.
    fn two_cells(workload: &'static str, second: [(f64, f64); 2]) -> Vec<Run> {
        let mut runs = vec![
            run(System::RdmaRpc, 10.0, 4000.0),
            run(System::Tonic, 50.0, 1000.0),
            run(System::RdmaRpc, second[0].0, second[0].1),
            run(System::Tonic, second[1].0, second[1].1),
        ];
        runs[2].workload = workload;
        runs[3].workload = workload;
        add_ratios(&mut runs);
        runs
    }

    #[test]
    fn streaming_ratios_use_the_same_workload_and_the_table_prints_them() {
        let runs = two_cells("bidi_pingpong", [(6.0, 9000.0), (30.0, 3000.0)]);
        let t = runs[2].vs_tonic.unwrap();
        assert_eq!((t.p50, t.calls_per_s), (0.2, 3.0));
        assert_eq!(runs[0].vs_tonic.unwrap().calls_per_s, 4.0);
        let streams = stream_table(&runs);
        assert!(streams.contains("bidi_pingpong"), "{streams}");
        assert!(!streams.contains("server_stream"), "{streams}");
        let row = streams.lines().find(|l| l.contains("rdma-rpc")).unwrap();
        assert!(row.contains("3.00") && row.contains("0.20"), "{row}");
        // The unary table leaves the streaming rows out.
        assert_eq!(table(&runs, &[]).matches("rdma-rpc").count(), 1);
    }

    #[test]
    fn client_stream_rows_get_their_own_table_of_gaps() {
        let runs = two_cells("client_stream", [(0.5, 2e6), (1.0, 1e6)]);
        let streams = stream_table(&runs);
        let (_, client) = streams
            .split_once("client_stream: latencies are gaps between messages the stream took")
            .unwrap_or_else(|| panic!("no client_stream table: {streams}"));
        assert!(client.contains("gap p50"), "{streams}");
        assert!(!streams.contains("server_stream"), "{streams}");
        let row = client.lines().find(|l| l.contains("rdma-rpc")).unwrap();
        assert!(row.contains("2.00") && row.contains("0.50"), "{row}");
        assert_eq!(table(&runs, &[]).matches("rdma-rpc").count(), 1);
    }

    #[test]
    fn the_footer_names_the_systems_each_workload_skipped() {
        let all = [
            System::RdmaRpc,
            System::Tonic,
            System::TonicUds,
            System::Tcp,
            System::TcpSpin,
        ];
        let note = skipped_note(&[Workload::Unary, Workload::ServerStream], &all);
        assert!(
            note.starts_with("skipped for server_stream: tonic-uds, tcp, tcp-spin ("),
            "{note}"
        );
        assert_eq!(skipped_note(&[Workload::Unary], &all), "");
        let note = skipped_note(&[Workload::Upload], &all);
        assert_eq!(
            note,
            "skipped for upload: tcp, tcp-spin (the TCP loops only echo)\n"
        );
    }

    #[test]
    fn upload_rows_get_their_own_table_and_ratios() {
        let runs = two_cells("upload", [(20.0, 3000.0), (40.0, 1000.0)]);
        assert_eq!(runs[2].vs_tonic.unwrap().calls_per_s, 3.0);
        let t = table(&runs, &[]);
        let (unary, upload) = t.split_once("upload:").expect("an upload table");
        assert_eq!(unary.matches("rdma-rpc").count(), 1, "{t}");
        let row = upload.lines().find(|l| l.contains("rdma-rpc")).unwrap();
        assert!(row.contains("3.00") && row.contains("0.50"), "{row}");
    }

    #[test]
    fn ratios_divide_by_the_same_cell_of_each_baseline() {
        let mut runs = vec![
            run(System::RdmaRpc, 10.0, 4000.0),
            run(System::Tonic, 50.0, 1000.0),
            run(System::Tcp, 5.0, 8000.0),
        ];
        add_ratios(&mut runs);
        let t = runs[0].vs_tonic.unwrap();
        assert_eq!((t.p50, t.calls_per_s), (0.2, 4.0));
        let c = runs[0].vs_tcp.unwrap();
        assert_eq!((c.p50, c.calls_per_s), (2.0, 0.5));
        assert_eq!(runs[1].vs_tonic.unwrap().p50, 1.0);
        assert_eq!(size_label(4 << 20), "4 MiB");
        assert_eq!(size_label(1024), "1 KiB");
        assert_eq!(size_label(32), "32 B");
    }
}
