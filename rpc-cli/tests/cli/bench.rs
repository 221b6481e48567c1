//! `bench`: the summary's counts, request templates, errors by code, the open loop,
//! CSV and SVG output.

use std::collections::BTreeSet;

use crate::support::{ok, rdma_rpc, TestServer};

fn summary(out: &str) -> serde_json::Value {
    serde_json::from_str(out).expect("--json prints one JSON document")
}

#[test]
fn bench_makes_n_calls_and_sums_them_up() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(
        &[
            "bench",
            &server.addr,
            "helloworld.Greeter/SayHello",
            "-d",
            r#"{"name":"x"}"#,
            "-c",
            "4",
            "-n",
            "60",
            "--warmup",
            "5",
            "--json",
        ],
        "",
    ));
    let s = summary(&out);
    assert_eq!(s["calls"], 60, "{out}");
    assert_eq!(s["ok"], 60, "{out}");
    assert_eq!(s["errors"], serde_json::json!({}), "{out}");
    assert_eq!(s["concurrency"], 4);
    let latency = &s["latency_us"];
    let figure = |name: &str| latency[name].as_f64().expect("a latency figure");
    assert!(figure("min") > 0.0, "{out}");
    assert!(
        figure("min") <= figure("p50") && figure("p50") <= figure("p99"),
        "{out}"
    );
    assert!(figure("p99") <= figure("max"), "{out}");
    let bars = s["histogram"].as_array().expect("histogram bars");
    let in_bars: u64 = bars
        .iter()
        .map(|b| b["calls"].as_u64().expect("a count"))
        .sum();
    assert_eq!(in_bars, 60, "{out}");
    // Warm-up calls reach the server but are not counted.
    assert_eq!(server.names().len(), 65);
}

#[test]
fn template_gives_each_call_its_number() {
    let server = TestServer::start(true);
    ok(rdma_rpc(
        &[
            "bench",
            &server.addr,
            "helloworld.Greeter/SayHello",
            "-d",
            r#"{"name":"n{{.RequestNumber}}"}"#,
            "-c",
            "3",
            "-n",
            "20",
            "--json",
        ],
        "",
    ));
    let got: BTreeSet<String> = server.names().into_iter().collect();
    let want: BTreeSet<String> = (0..20).map(|i| format!("n{i}")).collect();
    assert_eq!(got, want);
}

#[test]
fn errors_are_counted_by_code() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(
        &[
            "bench",
            &server.addr,
            "helloworld.Greeter/SayHello",
            "-c",
            "2",
            "-n",
            "10",
            "--json",
        ],
        "",
    ));
    let s = summary(&out);
    assert_eq!(s["calls"], 10, "{out}");
    assert_eq!(s["ok"], 0, "{out}");
    assert_eq!(
        s["errors"],
        serde_json::json!({"INVALID_ARGUMENT": {"calls": 10, "example": "name must not be empty"}})
    );
}

#[test]
fn open_loop_keeps_to_the_offered_rate() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(
        &[
            "bench",
            &server.addr,
            "helloworld.Greeter/SayHello",
            "-d",
            r#"{"name":"x"}"#,
            "-c",
            "4",
            "-n",
            "21",
            "--rps",
            "100",
            "--json",
        ],
        "",
    ));
    let s = summary(&out);
    assert_eq!(s["calls"], 21, "{out}");
    // Call 20 is due 200 ms after the start: the run cannot have ended sooner.
    assert!(s["seconds"].as_f64().expect("seconds") >= 0.2, "{out}");
    assert_eq!(s["rps"], 100.0);
}

#[test]
fn csv_lists_every_call_and_plot_writes_svg() {
    let server = TestServer::start(true);
    let dir = std::env::temp_dir().join(format!("rdma-rpc-cli-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let svg = dir.join("latency.svg");
    let out = ok(rdma_rpc(
        &[
            "bench",
            &server.addr,
            "helloworld.Greeter/SayHello",
            "-d",
            r#"{"name":"x"}"#,
            "--connections",
            "2",
            "-c",
            "4",
            "-n",
            "30",
            "--csv",
            "--plot",
            svg.to_str().expect("utf-8 path"),
        ],
        "",
    ));
    let plot = std::fs::read_to_string(&svg).expect("the plot was written");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        plot.starts_with("<svg"),
        "not SVG: {}",
        &plot[..plot.len().min(80)]
    );
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("call,start_us,latency_us,status"));
    let calls: Vec<u64> = lines
        .map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            assert_eq!(cells.len(), 4, "{line}");
            assert_eq!(cells[3], "OK", "{line}");
            cells[0].parse().expect("a call number")
        })
        .collect();
    assert_eq!(calls, (0..30).collect::<Vec<u64>>());
}

#[test]
fn bench_runs_streaming_methods() {
    let server = TestServer::start(true);
    let rectangle = r#"{"lo":{"latitude":400000000,"longitude":-750000000},"hi":{"latitude":420000000,"longitude":-730000000}}"#;
    let out = ok(rdma_rpc(
        &[
            "bench",
            &server.addr,
            "routeguide.RouteGuide/ListFeatures",
            "-d",
            rectangle,
            "-c",
            "2",
            "-n",
            "8",
            "--json",
        ],
        "",
    ));
    assert_eq!(summary(&out)["ok"], 8, "{out}");
    let points = r#"[{"latitude":1,"longitude":1},{"latitude":2,"longitude":2}]"#;
    let out = ok(rdma_rpc(
        &[
            "bench",
            &server.addr,
            "routeguide.RouteGuide/RecordRoute",
            "-d",
            points,
            "-c",
            "2",
            "-n",
            "8",
            "--json",
        ],
        "",
    ));
    assert_eq!(summary(&out)["ok"], 8, "{out}");
}

#[test]
fn text_summary_names_the_figures() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(
        &[
            "bench",
            &server.addr,
            "helloworld.Greeter/SayHello",
            "-d",
            r#"{"name":"x"}"#,
            "-n",
            "10",
        ],
        "",
    ));
    for heading in [
        "Summary:",
        "  Calls:        10\n",
        "Latency (µs):",
        "p99.9",
        "Histogram (µs):",
        "  [OK] 10 calls\n",
    ] {
        assert!(out.contains(heading), "no {heading:?} in:\n{out}");
    }
}
