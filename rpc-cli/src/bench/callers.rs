//! The callers: `-c` tasks taking call numbers from one counter until the run's
//! total or end time, each measuring its calls into its own [`Record`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prost_reflect::MethodDescriptor;
use rpc_core::metadata::MetadataMap;
use rpc_core::transport::Channel;
use rpc_core::Status;
use tokio::time::Instant;

use super::record::Record;
use super::template::Requests;
use crate::dynamic::{next_reply, streaming, unary};
use crate::fail::{local, Fail};

/// What every caller of one phase (warm-up or measured) shares.
#[derive(Debug)]
pub(crate) struct Phase {
    pub(crate) method: MethodDescriptor,
    pub(crate) path: &'static str,
    pub(crate) requests: Arc<Requests>,
    pub(crate) metadata: MetadataMap,
    pub(crate) timeout: Option<Duration>,
    /// Calls to make, at most.
    pub(crate) total: Option<u64>,
    /// No call starts at or after this.
    pub(crate) end: Option<Instant>,
    /// Open loop: call k is due at `start + k / rps`.
    pub(crate) rps: Option<f64>,
    pub(crate) start: Instant,
    pub(crate) keep_samples: bool,
    /// Next call number.
    pub(crate) next: AtomicU64,
    /// Calls ended (for the progress line).
    pub(crate) done: AtomicU64,
}

/// Runs `concurrency` callers over `channels` (caller i on channel i mod n) until
/// the phase ends; their records merged.
pub(crate) async fn run(
    phase: Arc<Phase>,
    channels: &[Channel],
    concurrency: usize,
) -> Result<Record, Fail> {
    let callers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let channel = channels[worker % channels.len()].clone();
            tokio::spawn(caller(Arc::clone(&phase), channel, worker))
        })
        .collect();
    let mut record = Record::new(phase.keep_samples);
    for caller in callers {
        let mine = caller
            .await
            .map_err(|e| local(format!("a caller task failed: {e}")))??;
        record.merge(mine);
    }
    Ok(record)
}

async fn caller(phase: Arc<Phase>, mut channel: Channel, worker: usize) -> Result<Record, Fail> {
    let mut record = Record::new(phase.keep_samples);
    loop {
        let call = phase.next.fetch_add(1, Ordering::Relaxed);
        if phase.total.is_some_and(|total| call >= total) {
            break;
        }
        let due = phase
            .rps
            .map(|rps| phase.start + Duration::from_secs_f64(call as f64 / rps));
        if phase
            .end
            .is_some_and(|end| due.unwrap_or_else(Instant::now) >= end)
        {
            break;
        }
        if let Some(due) = due {
            tokio::time::sleep_until(due).await;
        }
        // Open loop: from when the call was due, so a late send counts (no
        // coordinated omission).
        let began = due.unwrap_or_else(Instant::now);
        let result = one_call(&phase, &mut channel, call, worker).await?;
        let ended = Instant::now();
        record.add(call, began - phase.start, ended - began, result);
        phase.done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(record)
}

/// One call; the outer error (a request that cannot be made) stops the run, the
/// inner is the call's status.
async fn one_call(
    phase: &Phase,
    channel: &mut Channel,
    call: u64,
    worker: usize,
) -> Result<Result<(), Status>, Fail> {
    let metadata = phase.metadata.clone();
    if !phase.method.is_client_streaming() && !phase.method.is_server_streaming() {
        let request = phase.requests.one(call, worker)?;
        // The reply is not decoded: its arrival is what is measured.
        return Ok(unary(channel, phase.path, metadata, phase.timeout, request)
            .await
            .map(drop));
    }
    let requests = phase.requests.messages(call, worker)?;
    let requests = futures_util::stream::iter(requests.into_iter().map(Ok));
    let reply = streaming(channel, phase.path, metadata, phase.timeout, requests).await;
    let mut replies = match reply {
        Ok(reply) => reply.messages,
        Err(status) => return Ok(Err(status)),
    };
    while let Some(reply) = next_reply(&mut replies).await {
        if let Err(status) = reply {
            return Ok(Err(status));
        }
    }
    Ok(Ok(()))
}
