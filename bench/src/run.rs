//! The benchmark run: one server process per system, then every cell (payload ×
//! concurrency × system, systems interleaved so a cell's figures and its baselines'
//! are measured minutes apart at most), then the table, JSON and plot.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::child::ServerProcess;
use crate::cli::RunArgs;
use crate::floor::{self, Floor};
use crate::plot::{self, Panel};
use crate::progress::Progress;
use crate::provider::Provider;
use crate::report::{self, size_label, Failure, Report, Run};
use crate::runner::{self, Measured, Window};
use crate::system::System;
use crate::workload::Workload;
use crate::{link, rusage, systems};

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

    let cells = cells(&args, &systems);
    let mut progress = Progress::new(cells.len());
    let (mut runs, mut errors, mut panels) = (Vec::new(), Vec::new(), Vec::<Panel>::new());
    for (workload, size, conc, system) in cells {
        let label = match workload {
            Workload::Unary => format!("{system} {} ×{conc}", size_label(size)),
            w => format!("{system} {w} {} ×{conc}", size_label(size)),
        };
        progress.start(&label);
        let window = Window {
            warmup,
            duration,
            min_calls: conc.max(10) as u64,
            limit: warmup + duration + STALL_GRACE,
            // A stream's messages, either way: the gaps between them.
            gaps: matches!(workload, Workload::ServerStream | Workload::ClientStream),
        };
        let outcome = match servers.get_mut(&system.server()) {
            Some(Ok(server)) => cell(system, workload, server, &provider, size, conc, window).await,
            Some(Err(e)) => Err(e.clone()),
            None => Err("no server".into()),
        };
        progress.finish(&label, outcome.as_ref().err().map(String::as_str));
        match outcome {
            Ok(m) => {
                runs.push(Run::new(system, workload, size, conc, &m));
                if workload != Workload::Unary {
                    continue;
                }
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
                workload: workload.name(),
                payload_bytes: size,
                concurrency: conc,
                error,
            }),
        }
    }
    drop(servers);
    let stream_floor: Vec<Floor> = if args.workloads.contains(&Workload::ServerStream) {
        args.stream_sizes
            .iter()
            .map(|&n| Floor::measure(n))
            .collect()
    } else {
        Vec::new()
    };
    report::add_ratios(&mut runs);
    print!("{}", report::table(&runs, &errors));
    print!("{}", report::stream_table(&runs));
    print!("{}", floor::note(&stream_floor, &runs));
    print!("{}", report::skipped_note(&args.workloads, &systems));
    let report = Report {
        runs,
        errors,
        stream_floor,
        warmup_s: warmup.as_secs_f64(),
        duration_s: duration.as_secs_f64(),
        provider: provider.device().to_string(),
        link: link::rdma_link(&provider),
        workers: tokio::runtime::Handle::current().metrics().num_workers(),
        wall_s: started.elapsed().as_secs_f64(),
    };
    let window = provider
        .stream_window()
        .map(|w| format!("; stream window {w} B"))
        .unwrap_or_default();
    println!(
        "rdma-rpc on {}, link {}{window}; tokio workers per process: {}; wall time {:.1} s",
        report.provider, report.link, report.workers, report.wall_s
    );
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, json).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        plot::write(path, &panels)?;
    }
    Ok(())
}

/// Every cell in run order: (workload, payload, concurrency, system), systems
/// interleaved within a cell; streaming workloads only on systems that stream.
pub(crate) fn cells(args: &RunArgs, systems: &[System]) -> Vec<(Workload, usize, usize, System)> {
    let mut out = Vec::new();
    for &w in &args.workloads {
        let (sizes, concs): (&[usize], &[usize]) = match w {
            Workload::Unary | Workload::Upload => (&args.sizes, &args.concurrency),
            Workload::ServerStream | Workload::ClientStream => (&args.stream_sizes, &args.streams),
            Workload::BidiPingpong => (&args.stream_sizes, &[1]),
        };
        for &size in sizes {
            for &c in concs {
                for &s in systems {
                    if s.carries(size) && w.runs_on(s) {
                        out.push((w, size, c.max(1), s));
                    }
                }
            }
        }
    }
    out.dedup();
    out
}

/// Connects `conc` clients of `system` and runs one cell against `server`.
async fn cell(
    system: System,
    workload: Workload,
    server: &mut ServerProcess,
    provider: &Provider,
    size: usize,
    conc: usize,
    window: Window,
) -> Result<Measured, String> {
    let connecting = systems::connect(system, workload, server.addr(), conc, provider);
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    fn cells_of(args: &[&str]) -> Vec<(Workload, usize, usize, System)> {
        let cli = Cli::parse_from(std::iter::once("rpc-bench").chain(args.iter().copied()));
        cells(&cli.run, &selected(&cli.run))
    }

    #[test]
    fn default_workload_is_unary_only() {
        let cells = cells_of(&["--quick"]);
        // 4 sizes x 3 concurrencies x 5 systems (tonic-uds and tcp-spin included).
        assert_eq!(cells.len(), 60);
        assert!(cells.iter().any(|c| c.3 == System::TonicUds));
        assert!(cells.iter().any(|c| c.3 == System::TcpSpin));
        assert!(cells.iter().all(|c| c.0 == Workload::Unary));
    }

    #[test]
    fn streaming_cells_skip_systems_that_do_not_stream() {
        let cells = cells_of(&[
            "--ud",
            "--workloads",
            "server_stream,client_stream,bidi_pingpong",
        ]);
        assert!(cells
            .iter()
            .all(|c| matches!(c.3, System::RdmaRpc | System::Tonic)));
        // server_stream and client_stream: 3 sizes x 2 stream counts; bidi_pingpong:
        // 3 sizes x 1 stream.
        let count = |w| cells.iter().filter(|c| c.0 == w).count();
        assert_eq!(count(Workload::ServerStream), 3 * 2 * 2);
        assert_eq!(count(Workload::ClientStream), 3 * 2 * 2);
        assert_eq!(count(Workload::BidiPingpong), 3 * 2);
        assert!(cells
            .iter()
            .any(|c| c == &(Workload::ServerStream, 1 << 20, 1, System::RdmaRpc)));
        assert!(cells
            .iter()
            .any(|c| c == &(Workload::ServerStream, 65536, 16, System::Tonic)));
        assert!(cells
            .iter()
            .any(|c| c == &(Workload::ClientStream, 1 << 20, 16, System::RdmaRpc)));
        assert!(cells
            .iter()
            .all(|c| c.0 != Workload::BidiPingpong || c.2 == 1));
    }

    #[test]
    fn an_unknown_workload_is_refused() {
        let r = Cli::try_parse_from(["rpc-bench", "--workloads", "unary,pub_sub"]);
        assert!(r.is_err());
    }
}
