//! The `call` role: exactly `--calls` calls after `--warmup-calls`, then a normal exit
//! (what `scripts/callgrind-per-call` counts instructions of).

use std::time::Instant;

use bytes::Bytes;

use crate::cli::CallArgs;
use crate::provider::Provider;
use crate::systems::{self, Caller};
use crate::workload::Workload;

/// Connects, warms up, makes the calls, prints `calls N seconds S`.
pub(crate) async fn call(args: CallArgs) -> Result<(), String> {
    let provider = Provider::from_args(&args.provider)?;
    let conc = args.concurrency.max(1);
    let callers =
        systems::connect(args.system, Workload::Unary, args.addr, conc, &provider).await?;
    let payload = Bytes::from(vec![0xa5; args.payload]);
    let callers = calls(callers, &payload, args.warmup_calls).await?;
    let t = Instant::now();
    let callers = calls(callers, &payload, args.calls).await?;
    let secs = t.elapsed().as_secs_f64();
    drop(callers);
    println!("calls {} seconds {secs:.6}", args.calls);
    Ok(())
}

/// `n` calls shared among the callers, each making its share one after another.
async fn calls(callers: Vec<Caller>, payload: &Bytes, n: u64) -> Result<Vec<Caller>, String> {
    let k = callers.len() as u64;
    let tasks: Vec<_> = callers
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let share = n / k + u64::from((i as u64) < n % k);
            let payload = payload.clone();
            tokio::spawn(async move {
                for _ in 0..share {
                    c.call(&payload).await?;
                }
                Ok::<_, String>(c)
            })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.map_err(|e| e.to_string())??);
    }
    Ok(out)
}
