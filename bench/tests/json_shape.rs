//! A tiny real run of the binary: one cell per system, checked for the documented
//! JSON shape (no timing assertions: only that every figure is there and calls ran).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const FIELDS: [&str; 10] = [
    "system",
    "workload",
    "payload_bytes",
    "concurrency",
    "p50_us",
    "p99_us",
    "p999_us",
    "calls_per_s",
    "mb_per_s",
    "cpu_us_per_call",
];

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rpc-bench-{}-{name}", std::process::id()))
}

#[test]
fn one_cell_per_system_writes_every_field_and_the_link_and_ud_fails_cleanly() {
    let json = scratch("run.json");
    let plot = scratch("run.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_rpc-bench"))
        .args(["--sizes", "32", "--concurrency", "2", "--warmup", "20ms"])
        .args(["--duration", "50ms", "--ud", "--json"])
        .arg(&json)
        .arg("--plot")
        .arg(&plot)
        // Not a count the host's cores would give by default, so that the report
        // must say what ran.
        .env("TOKIO_WORKER_THREADS", "3")
        .output()
        .expect("rpc-bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rpc-bench failed: {stderr}");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["workers"], 3, "{report}");
    assert!(
        report.get("stream_floor").is_none(),
        "unary only: no ceiling {report}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("tokio workers per process: 3"),
        "the last line names the runtime's workers"
    );
    // The link that carried rdma-rpc's queue pairs is named: on one host the soft
    // devices count every connection moved to shared memory, unless TCP is forced.
    let link = report["link"].as_str().expect("link is a string");
    let forced_tcp = std::env::var("RDMA_RPC_SOFT_LINK").is_ok_and(|v| v.trim() == "tcp");
    assert_eq!(link, if forced_tcp { "tcp" } else { "shm" }, "{report}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("link {link}")),
        "the table names the link"
    );
    let runs = report["runs"].as_array().expect("runs is a list");
    for system in ["rdma-rpc", "tonic", "tonic-uds", "tcp", "tcp-spin"] {
        let run = row(runs, system, "unary");
        assert_eq!(run["payload_bytes"], 32);
        assert_eq!(run["concurrency"], 2);
        assert!(run["calls"].as_u64().unwrap() > 0, "{run}");
        assert!(run["calls_per_s"].as_f64().unwrap() > 0.0, "{run}");
    }
    // rdma-rpc-ud is either measured or named in `errors` with a reason, never a crash.
    let ud_runs = runs.iter().filter(|r| r["system"] == "rdma-rpc-ud").count();
    let errors = report["errors"].as_array().expect("errors is a list");
    let ud_errors: Vec<_> = errors
        .iter()
        .filter(|e| e["system"] == "rdma-rpc-ud")
        .collect();
    assert_eq!(ud_runs + ud_errors.len(), 1, "{report}");
    for e in ud_errors {
        assert!(!e["error"].as_str().unwrap().is_empty());
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("rdma-rpc") && svg.contains("tonic"));
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(plot);
}

/// Runs rpc-bench briefly with `args`, which must succeed and report no failed
/// cell: its JSON report (written to a scratch `name`, removed after) and stdout.
fn run_without_errors(name: &str, args: &[&str]) -> (Value, String) {
    let json = scratch(name);
    let out = Command::new(env!("CARGO_BIN_EXE_rpc-bench"))
        .args(args)
        .args(["--warmup", "20ms", "--duration", "50ms", "--json"])
        .arg(&json)
        .output()
        .expect("rpc-bench runs");
    assert!(
        out.status.success(),
        "rpc-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(json);
    assert_eq!(report["errors"].as_array().unwrap().len(), 0, "{report}");
    (report, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The run of `system` and `workload` among `runs`, with every field filled.
fn row<'a>(runs: &'a [Value], system: &str, workload: &str) -> &'a Value {
    let run = runs
        .iter()
        .find(|r| r["system"] == system && r["workload"] == workload)
        .unwrap_or_else(|| panic!("no {workload} run of {system}: {runs:?}"));
    for f in FIELDS {
        assert!(!run[f].is_null(), "{system} lacks {f}: {run}");
    }
    run
}

#[test]
fn streaming_workloads_write_rows_for_rdma_rpc_and_tonic_and_name_what_they_skip() {
    let (report, stdout) = run_without_errors(
        "stream.json",
        &[
            "--workloads",
            "server_stream,bidi_pingpong",
            "--stream-sizes",
            "32",
            "--streams",
            "2",
        ],
    );
    let runs = report["runs"].as_array().expect("runs is a list");
    for (workload, streams) in [("server_stream", 2), ("bidi_pingpong", 1)] {
        for system in ["rdma-rpc", "tonic"] {
            let run = row(runs, system, workload);
            assert_eq!(run["concurrency"], streams, "{run}");
            assert!(run["calls_per_s"].as_f64().unwrap() > 0.0, "{run}");
            assert!(run["mb_per_s"].as_f64().unwrap() > 0.0, "{run}");
        }
    }
    assert_eq!(runs.len(), 4, "only rdma-rpc and tonic stream: {report}");
    // The transport-free ceiling of one stream, per stream size, beside the table.
    let floor = report["stream_floor"]
        .as_array()
        .expect("stream_floor is a list");
    assert_eq!(floor.len(), 1, "{report}");
    assert_eq!(floor[0]["payload_bytes"], 32);
    for f in [
        "encode_ns",
        "decode_ns",
        "clock_ns",
        "stream_max_msgs_per_s",
    ] {
        assert!(
            floor[0][f].as_f64().is_some_and(|x| x > 0.0),
            "{f}: {report}"
        );
    }
    assert!(
        stdout.contains("server_stream ceiling, with no transport"),
        "{stdout}"
    );
    assert!(
        stdout.contains("skipped for server_stream, bidi_pingpong: tonic-uds, tcp, tcp-spin"),
        "{stdout}"
    );
}

/// `client_stream` at 1 KiB: tonic's server (h2) closes a connection whose unread
/// DATA frames under 256 B outgrow its budget, which a 32 B client stream written
/// faster than the handler reads does (that cell then fails, named in `errors`).
#[test]
fn client_stream_writes_rows_for_rdma_rpc_and_tonic_and_name_what_it_skips() {
    let (report, stdout) = run_without_errors(
        "client_stream.json",
        &[
            "--workloads",
            "client_stream",
            "--stream-sizes",
            "1K",
            "--streams",
            "2",
        ],
    );
    let runs = report["runs"].as_array().expect("runs is a list");
    for system in ["rdma-rpc", "tonic"] {
        let run = row(runs, system, "client_stream");
        assert_eq!(run["payload_bytes"], 1024, "{run}");
        assert_eq!(run["concurrency"], 2, "{run}");
        assert!(run["calls_per_s"].as_f64().unwrap() > 0.0, "{run}");
        assert!(run["mb_per_s"].as_f64().unwrap() > 0.0, "{run}");
    }
    assert_eq!(runs.len(), 2, "only rdma-rpc and tonic stream: {report}");
    // The transport-free ceiling is server_stream's alone.
    assert!(report.get("stream_floor").is_none(), "{report}");
    assert!(
        stdout.contains("\nclient_stream: latencies are gaps between messages the stream took"),
        "{stdout}"
    );
    assert!(
        stdout.contains("skipped for client_stream: tonic-uds, tcp, tcp-spin"),
        "{stdout}"
    );
}

#[test]
fn upload_writes_rows_for_rdma_rpc_and_tonic_and_skips_the_tcp_loop() {
    let (report, stdout) = run_without_errors(
        "upload.json",
        &[
            "--workloads",
            "upload",
            "--systems",
            "rdma-rpc,tonic,tcp",
            "--sizes",
            "64K",
            "--concurrency",
            "2",
        ],
    );
    let runs = report["runs"].as_array().expect("runs is a list");
    for system in ["rdma-rpc", "tonic"] {
        let run = row(runs, system, "upload");
        assert_eq!(run["payload_bytes"], 65536, "{run}");
        assert!(run["mb_per_s"].as_f64().unwrap() > 0.0, "{run}");
    }
    assert_eq!(runs.len(), 2, "the TCP loop only echoes: {report}");
    assert!(stdout.contains("\nupload: the payload one way"), "{stdout}");
    assert!(
        stdout.contains("skipped for upload: tcp (the TCP loops only echo)"),
        "{stdout}"
    );
}
