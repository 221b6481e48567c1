//! The benchmark run: one server process per system, then every cell (payload ×
//! concurrency × system, systems interleaved so a cell's figures and its baselines'
//! are measured minutes apart at most), then the table, JSON and plot.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::child::ServerProcess;
use crate::cli::RunArgs;
use crate::plot::{self, Panel};
use crate::progress::Progress;
use crate::provider::Provider;
use crate::report::{self, size_label, Failure, Report, Run};
use crate::runner::{self, Measured, Window};
use crate::system::System;
use crate::{rusage, systems};

/// How long connecting a cell's clients may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long past its nominal length a cell may take before it counts as stalled.
const STALL_GRACE: Duration = Duration::from_secs(60);

/// The systems a run covers, in table order: `--systems`, plus rdma-rpc-ud with `--ud`.
pub(crate) fn selected(args: &RunArgs) -> Vec<System> {
    System::ALL
        .into_iter()
        .filter(|s| args.systems.contains(s) || (args.ud && *s == System::RdmaRpcUd))
        .collect()
}

/// Runs the benchmark and prints (and writes) its report.
pub(crate) async fn run(args: RunArgs) -> Result<(), String> {
    let started = Instant::now();
    let provider = Provider::from_args(&args.provider)?;
    let systems = selected(&args);
    let (warmup, duration) = if args.quick {
        (Duration::from_millis(150), Duration::from_millis(400))
    } else {
        (Duration::from_secs(1), Duration::from_secs(3))
    };
    let warmup = args.warmup.unwrap_or(warmup);
    let duration = args.duration.unwrap_or(duration);

    let mut servers: BTreeMap<System, Result<ServerProcess, String>> = BTreeMap::new();
    for s in &systems {
        servers
            .entry(s.server())
            .or_insert_with(|| ServerProcess::start(s.server(), &provider));
    }

    let cells: Vec<(usize, usize, System)> = args
        .sizes
        .iter()
        .flat_map(|&size| args.concurrency.iter().map(move |&c| (size, c.max(1))))
        .flat_map(|(size, c)| systems.iter().map(move |&s| (size, c, s)))
        .filter(|&(size, _, s)| s.carries(size))
        .collect();
    let mut progress = Progress::new(cells.len());
    let (mut runs, mut errors, mut panels) = (Vec::new(), Vec::new(), Vec::<Panel>::new());
    for (size, conc, system) in cells {
        let label = format!("{system} {} ×{conc}", size_label(size));
        progress.start(&label);
        let window = Window {
            warmup,
            duration,
            min_calls: conc.max(10) as u64,
            limit: warmup + duration + STALL_GRACE,
        };
        let outcome = match servers.get_mut(&system.server()) {
            Some(Ok(server)) => cell(system, server, &provider, size, conc, window).await,
            Some(Err(e)) => Err(e.clone()),
            None => Err("no server".into()),
        };
        progress.finish(&label, outcome.as_ref().err().map(String::as_str));
        match outcome {
            Ok(m) => {
                runs.push(Run::new(system, size, conc, &m));
                let cdf = m.hist.cdf().into_iter().map(|(ns, f)| (ns / 1e3, f));
                let curve = (system, cdf.collect());
                match panels
                    .iter_mut()
                    .find(|p| p.payload == size && p.concurrency == conc)
                {
                    Some(p) => p.curves.push(curve),
                    None => panels.push(Panel {
                        payload: size,
                        concurrency: conc,
                        curves: vec![curve],
                    }),
                }
            }
            Err(error) => errors.push(Failure {
                system: system.name(),
                workload: "unary",
                payload_bytes: size,
                concurrency: conc,
                error,
            }),
        }
    }
    drop(servers);
    report::add_ratios(&mut runs);
    print!("{}", report::table(&runs, &errors));
    let report = Report {
        runs,
        errors,
        warmup_s: warmup.as_secs_f64(),
        duration_s: duration.as_secs_f64(),
        provider: provider.device().to_string(),
        wall_s: started.elapsed().as_secs_f64(),
    };
    println!("wall time {:.1} s", report.wall_s);
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, json).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        plot::write(path, &panels)?;
    }
    Ok(())
}

/// Connects `conc` clients of `system` and runs one cell against `server`.
async fn cell(
    system: System,
    server: &mut ServerProcess,
    provider: &Provider,
    size: usize,
    conc: usize,
    window: Window,
) -> Result<Measured, String> {
    let connecting = systems::connect(system, server.addr(), conc, provider);
    let callers = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| format!("connecting took over {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| format!("connecting: {e}"))?;
    let payload = Bytes::from(vec![0xa5; size]);
    // The server answers on a pipe: a short blocking exchange, kept off the workers.
    let mut probe = || {
        let client = rusage::own_cpu();
        let server = tokio::task::block_in_place(|| server.cpu())?;
        Ok((client, server))
    };
    runner::closed_loop(callers, payload, window, &mut probe).await
}
