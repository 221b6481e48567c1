//! What one caller measured: a latency histogram, the errors by status code and,
//! for `--csv` and `--plot`, every call.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use rpc_core::Status;

/// One measured call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) call: u64,
    /// When it was due (open loop) or sent (closed loop), from the start of the run.
    pub(crate) start: Duration,
    pub(crate) latency: Duration,
    /// 0 for OK, else the status code.
    pub(crate) code: i32,
}

/// A caller's measurements (merged into the run's at the end).
#[derive(Debug)]
pub(crate) struct Record {
    /// Latency in nanoseconds, of every call (OK or not).
    pub(crate) latency: Histogram<u64>,
    pub(crate) ok: u64,
    /// Errors by status code, with the first message seen for each.
    pub(crate) errors: BTreeMap<i32, (u64, String)>,
    pub(crate) samples: Option<Vec<Sample>>,
    /// When the last call ended, from the start of the run.
    pub(crate) last_end: Duration,
}

impl Record {
    pub(crate) fn new(keep_samples: bool) -> Record {
        Record {
            latency: Histogram::new(3).expect("3 significant figures is a valid precision"),
            ok: 0,
            errors: BTreeMap::new(),
            samples: keep_samples.then(Vec::new),
            last_end: Duration::ZERO,
        }
    }

    pub(crate) fn add(
        &mut self,
        call: u64,
        start: Duration,
        latency: Duration,
        result: Result<(), Status>,
    ) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX).max(1);
        // `record`, not `saturating_record`: only it grows an auto-resizing histogram.
        if self.latency.record(nanos).is_err() {
            self.latency.saturating_record(nanos);
        }
        let code = match result {
            Ok(()) => {
                self.ok += 1;
                0
            }
            Err(status) => {
                let code = status.code() as i32;
                self.errors
                    .entry(code)
                    .or_insert_with(|| (0, status.message().to_owned()))
                    .0 += 1;
                code
            }
        };
        if let Some(samples) = &mut self.samples {
            samples.push(Sample {
                call,
                start,
                latency,
                code,
            });
        }
        self.last_end = self.last_end.max(start + latency);
    }

    pub(crate) fn merge(&mut self, other: Record) {
        self.latency
            .add(&other.latency)
            .expect("auto-resizing histograms of one precision add");
        self.ok += other.ok;
        for (code, (count, message)) in other.errors {
            self.errors.entry(code).or_insert((0, message)).0 += count;
        }
        if let (Some(mine), Some(theirs)) = (&mut self.samples, other.samples) {
            mine.extend(theirs);
        }
        self.last_end = self.last_end.max(other.last_end);
    }

    pub(crate) fn count(&self) -> u64 {
        self.latency.len()
    }
}
