//! `rdma-rpc bench`: ghz for rdma-rpc services. Callers make calls of one method
//! closed loop (`-c` in flight) or open loop (`--rps`), then the summary.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio::time::Instant;

use crate::args::BenchArgs;
use crate::connect::Connection;
use crate::dynamic::path_of;
use crate::fail::{local, Fail};
use crate::headers;
use crate::schema::Schema;

mod callers;
mod encoded;
mod plot;
mod progress;
mod record;
mod report;
mod template;

use callers::Phase;
use template::{Requests, Template};

/// Calls a run makes when neither `-n` nor `--duration` is given (as ghz).
const DEFAULT_TOTAL: u64 = 200;

pub(crate) async fn run(args: BenchArgs) -> Result<(), Fail> {
    if args.concurrency == 0 || args.connections == 0 {
        return Err(local("-c and --connections must be at least 1"));
    }
    if args.rps.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return Err(local("--rps must be a positive number of calls per second"));
    }
    let connection = Connection::new(&args.target)?;
    let metadata = headers::parse(&args.options.headers)?;
    let schema = Schema::load(&args.schema, &connection, None).await?;
    let method = schema.method(&args.method)?;
    let requests = Arc::new(Requests::new(
        Template::parse(&args.data, &method)?,
        method.clone(),
    )?);
    let mut channels = vec![connection.channel().await?];
    while channels.len() < args.connections {
        channels.push(connection.connect().await?);
    }
    let phase = |total: Option<u64>,
                 duration: Option<std::time::Duration>,
                 rps: Option<f64>,
                 keep_samples: bool| {
        let start = Instant::now();
        Arc::new(Phase {
            method: method.clone(),
            path: path_of(&method),
            requests: Arc::clone(&requests),
            metadata: metadata.clone(),
            timeout: args.options.timeout,
            total,
            end: duration.map(|d| start + d),
            rps,
            start,
            keep_samples,
            next: AtomicU64::new(0),
            done: AtomicU64::new(0),
        })
    };
    let show_progress = !args.no_progress;
    if args.warmup > 0 {
        let warmup = phase(Some(args.warmup), None, None, false);
        let line = show_progress
            .then(|| progress::show(Arc::clone(&warmup), "warm-up"))
            .flatten();
        let done = callers::run(warmup, &channels, args.concurrency).await;
        progress::hide(line);
        done?;
    }
    let total = match (args.total, args.duration) {
        (None, None) => Some(DEFAULT_TOTAL),
        (total, _) => total,
    };
    let keep_samples = args.csv || args.plot.is_some();
    let measured = phase(total, args.duration, args.rps, keep_samples);
    let line = show_progress
        .then(|| progress::show(Arc::clone(&measured), "bench"))
        .flatten();
    let record = callers::run(measured, &channels, args.concurrency).await;
    progress::hide(line);
    let record = record?;
    let summary = report::Summary::new(
        &record,
        &args.target.addr,
        method.full_name(),
        args.concurrency,
        args.connections,
        args.rps,
    );
    if let Some(path) = &args.plot {
        let title = format!(
            "rdma-rpc bench {}: {} calls, {} in flight",
            method.full_name(),
            summary.calls,
            args.concurrency
        );
        plot::write(path, &record, &title).map_err(local)?;
    }
    if args.json {
        let json = serde_json::to_string_pretty(&summary).map_err(local)?;
        println!("{json}");
    } else if args.csv {
        print!("{}", report::csv(&record));
    } else {
        print!("{}", summary.text());
    }
    Ok(())
}
