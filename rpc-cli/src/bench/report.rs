//! The run's summary: as text (with a histogram), as JSON, and every call as CSV.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use rpc_core::Code;
use serde::Serialize;

use super::record::Record;
use crate::fail::code_name;

/// Latency figures in microseconds.
#[derive(Debug, Serialize)]
pub(crate) struct Latency {
    pub(crate) min: f64,
    pub(crate) mean: f64,
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) p99_9: f64,
    pub(crate) max: f64,
}

/// One bar of the histogram: calls with a latency up to `up_to_us` (and over the
/// previous bar's).
#[derive(Debug, Serialize)]
pub(crate) struct Bar {
    pub(crate) up_to_us: f64,
    pub(crate) calls: u64,
}

/// Errors of one status code.
#[derive(Debug, Serialize)]
pub(crate) struct Errors {
    pub(crate) calls: u64,
    /// The first message seen with this code.
    pub(crate) example: String,
}

/// Everything `--json` prints.
#[derive(Debug, Serialize)]
pub(crate) struct Summary {
    pub(crate) addr: String,
    pub(crate) method: String,
    pub(crate) concurrency: usize,
    pub(crate) connections: usize,
    pub(crate) rps: Option<f64>,
    pub(crate) calls: u64,
    pub(crate) ok: u64,
    pub(crate) errors: BTreeMap<String, Errors>,
    pub(crate) seconds: f64,
    pub(crate) calls_per_second: f64,
    pub(crate) latency_us: Latency,
    pub(crate) histogram: Vec<Bar>,
}

impl Summary {
    pub(crate) fn new(
        record: &Record,
        addr: &str,
        method: &str,
        concurrency: usize,
        connections: usize,
        rps: Option<f64>,
    ) -> Summary {
        let h = &record.latency;
        let us = |nanos: u64| nanos as f64 / 1e3;
        let latency_us = if h.is_empty() {
            Latency {
                min: 0.0,
                mean: 0.0,
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                p99_9: 0.0,
                max: 0.0,
            }
        } else {
            Latency {
                min: us(h.min()),
                mean: h.mean() / 1e3,
                p50: us(h.value_at_quantile(0.5)),
                p90: us(h.value_at_quantile(0.9)),
                p99: us(h.value_at_quantile(0.99)),
                p99_9: us(h.value_at_quantile(0.999)),
                max: us(h.max()),
            }
        };
        let seconds = record.last_end.as_secs_f64();
        Summary {
            addr: addr.to_owned(),
            method: method.to_owned(),
            concurrency,
            connections,
            rps,
            calls: record.count(),
            ok: record.ok,
            errors: record
                .errors
                .iter()
                .map(|(code, (calls, example))| {
                    let name = code_name(Code::from(*code)).to_owned();
                    let errors = Errors {
                        calls: *calls,
                        example: example.clone(),
                    };
                    (name, errors)
                })
                .collect(),
            seconds,
            calls_per_second: if seconds > 0.0 {
                record.count() as f64 / seconds
            } else {
                0.0
            },
            latency_us,
            histogram: bars(record, 10),
        }
    }

    /// The summary as ghz prints it: counts, rate, latency figures, a histogram and
    /// the status code distribution.
    pub(crate) fn text(&self) -> String {
        let mut t = String::new();
        let l = &self.latency_us;
        let _ = writeln!(t, "Summary:");
        let _ = writeln!(t, "  Method:       {}", self.method);
        let _ = writeln!(
            t,
            "  Load:         {} in flight on {} connection(s){}",
            self.concurrency,
            self.connections,
            self.rps
                .map(|r| format!(", {r} calls/s offered"))
                .unwrap_or_default()
        );
        let _ = writeln!(t, "  Calls:        {}", self.calls);
        let _ = writeln!(t, "  Total:        {:.3} s", self.seconds);
        let _ = writeln!(t, "  Calls/s:      {:.0}", self.calls_per_second);
        let _ = writeln!(t, "\nLatency (µs):");
        let _ = writeln!(
            t,
            "  min {:.1}  mean {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            l.min, l.mean, l.p50, l.p90, l.p99, l.p99_9, l.max
        );
        let _ = writeln!(t, "\nHistogram (µs):");
        let most = self
            .histogram
            .iter()
            .map(|b| b.calls)
            .max()
            .unwrap_or(0)
            .max(1);
        for bar in &self.histogram {
            let width = (bar.calls * 40).div_ceil(most) as usize;
            let _ = writeln!(
                t,
                "  {:>10.1} [{:>8}] |{}",
                bar.up_to_us,
                bar.calls,
                "∎".repeat(width)
            );
        }
        let _ = writeln!(t, "\nStatus code distribution:");
        let _ = writeln!(t, "  [OK] {} calls", self.ok);
        for (code, errors) in &self.errors {
            let _ = writeln!(t, "  [{code}] {} calls: {}", errors.calls, errors.example);
        }
        t
    }
}

/// `n` bars of equal width from the fastest call to the slowest.
fn bars(record: &Record, n: usize) -> Vec<Bar> {
    let h = &record.latency;
    if h.is_empty() {
        return Vec::new();
    }
    let (min, max) = (h.min() as f64, h.max() as f64);
    let width = ((max - min) / n as f64).max(1.0);
    let mut bars: Vec<Bar> = (1..=n)
        .map(|i| Bar {
            up_to_us: (min + width * i as f64) / 1e3,
            calls: 0,
        })
        .collect();
    for value in h.iter_recorded() {
        let v = h.highest_equivalent(value.value_iterated_to()) as f64;
        let i = (((v - min) / width).ceil() as usize).clamp(1, n) - 1;
        bars[i].calls += value.count_at_value();
    }
    bars
}

/// Every measured call, in call order: `call,start_us,latency_us,status`.
pub(crate) fn csv(record: &Record) -> String {
    let mut samples = record.samples.clone().unwrap_or_default();
    samples.sort_by_key(|s| s.call);
    let mut t = String::from("call,start_us,latency_us,status\n");
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for s in samples {
        let _ = writeln!(
            t,
            "{},{:.1},{:.1},{}",
            s.call,
            us(s.start),
            us(s.latency),
            code_name(Code::from(s.code))
        );
    }
    t
}
