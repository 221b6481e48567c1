//! `Reader`: pulls messages lent by the peer with RDMA Read into regions of a
//! [`RegionPool`], one QP's worth.
//!
//! Each read takes a region from the pool in order of arrival (waiting, without
//! blocking anyone, while the pool has no room), copies a caller-given prefix to its
//! head (a request's path and metadata, so head and body share one buffer), then
//! the message: one range of the peer's memory, or a gather list of ranges and
//! inline runs, each placed at its offset (the runs copied at once, the ranges read
//! by Reads posted together). Reads are at most the device's max message size each, with at most
//! `max_wrs` Read WRs in flight on the QP (they share its send queue and its
//! outstanding-Read limit). A finished read hands out [`Bytes`] that share the region
//! (no copy), or the completion status that failed it. A region is given back only
//! once every Read posted into it has completed (flushed ones included), so the
//! device never writes memory the pool handed to someone else.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Context;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::qp::QueuePair;
use crate::wc::{WcStatus, WorkCompletion};
use crate::wr::{SendOp, SendWr};

use super::reads_in_flight::InFlight;
use super::region_pool::{PooledRegion, RegionPool, Ticket};

/// Bit of a Read WR's `wr_id` that tells its completion from a send slot's.
const READ_BIT: u64 = 1 << 63;

/// Why a read gave no bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The message is larger than the whole pool (the message names the limit).
    TooLarge(String),
    /// A Read completed with this status (`REM_ACCESS_ERR`: the peer's descriptor
    /// named memory it did not lend; the QP is in error now).
    Failed(WcStatus),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::TooLarge(m) => f.write_str(m),
            ReadError::Failed(s) => write!(f, "RDMA Read failed: {s:?}"),
        }
    }
}

/// One run of a message to read, in order: bytes the caller already has (the
/// frame carried them), or a range of the peer's registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Bytes copied into the region at their place.
    Inline(&'a [u8]),
    /// `len` bytes at the peer's `addr` under `rkey`, read into their place.
    Remote {
        /// The peer's virtual address of the first byte.
        addr: u64,
        /// The key that exposes them.
        rkey: u32,
        /// Bytes.
        len: u32,
    },
}

/// A range of the peer's memory and where it goes in the region.
#[derive(Debug, Clone, Copy)]
struct Remote {
    addr: u64,
    rkey: u32,
    len: u32,
    /// Offset in the region.
    at: usize,
}

/// Alignment a read's destination is given relative to its source (`align`).
const COPY_ALIGN: u64 = 64;

struct Waiting {
    tag: u32,
    /// Bytes of region the read fills.
    len: usize,
    /// The largest remote range's address and offset in the message (`align`).
    largest: Option<(u64, usize)>,
    /// The prefix and inline runs, back to back, and where each goes.
    inline: Vec<u8>,
    inline_at: Vec<(usize, usize)>,
    remote: Vec<Remote>,
    ticket: Option<Ticket>,
}

struct Active {
    tag: u32,
    len: usize,
    /// Bytes skipped at the region's start (`align`).
    pad: usize,
    region: PooledRegion,
    remote: Vec<Remote>,
    /// The remote range being posted, and its bytes posted so far.
    next: usize,
    posted: u32,
    /// Read WRs posted and not completed.
    outstanding: u32,
    failed: Option<WcStatus>,
    /// Counted in [`super::reads_in_flight`] until finished or abandoned.
    _in_flight: InFlight,
}

impl Active {
    fn all_posted(&self) -> bool {
        self.next >= self.remote.len()
    }
}

/// Bytes to skip before a destination at `dst` so that it lies at the same offset
/// within `COPY_ALIGN` bytes as its source at `src`. The soft provider copies a Read
/// with the CPU (`process_vm_writev` on one host), and a copy whose destination runs
/// a few bytes ahead of its source within a page stalls on 4 KiB aliasing: measured
/// here (AMD EPYC, 4 MiB), 1.2-1.4 GB/s at 1-21 bytes ahead against 6-8 GB/s aligned.
/// A body lent where its `Bytes` lie starts 16 bytes into a page (a heap
/// allocation), and its head puts the destination anywhere. A NIC ignores it.
fn align(src: u64, dst: u64) -> usize {
    (src.wrapping_sub(dst) % COPY_ALIGN) as usize
}

/// The RDMA Reads of one QP.
pub struct Reader {
    qp: Arc<QueuePair>,
    pool: RegionPool,
    max_piece: u32,
    max_wrs: u32,
    wrs: u32,
    waiting: VecDeque<Waiting>,
    /// Reads holding a region, in the order they started: Reads are posted in this
    /// order, so that a read waiting for the WR budget is never passed by later ones.
    active: VecDeque<Active>,
    done: VecDeque<(u32, std::result::Result<Bytes, ReadError>)>,
}

impl Reader {
    /// Reads on `qp` into regions of `pool`, each Read WR at most `max_piece` bytes
    /// (the device's max message size), at most `max_wrs` of them in flight.
    pub fn new(qp: Arc<QueuePair>, pool: RegionPool, max_piece: u32, max_wrs: u32) -> Reader {
        Reader {
            qp,
            pool,
            max_piece: max_piece.max(1),
            max_wrs: max_wrs.max(1),
            wrs: 0,
            waiting: VecDeque::new(),
            active: VecDeque::new(),
            done: VecDeque::new(),
        }
    }

    /// The pool the reads take regions from.
    pub fn pool(&self) -> &RegionPool {
        &self.pool
    }

    /// Whether a completion is one of this reader's Reads.
    pub fn owns(wc: &WorkCompletion) -> bool {
        wc.wr_id & READ_BIT != 0
    }

    /// Reads in progress or waiting for room.
    pub fn len(&self) -> usize {
        self.waiting.len() + self.active.len()
    }

    /// Whether no read is in progress or waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether [`Reader::pump`] or [`Reader::poll_done`] has anything to do: reads
    /// waiting, in progress, or finished and not yet taken.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.active.is_empty() || !self.done.is_empty()
    }

    /// Queues a read of `len` bytes at the peer's `addr` under `rkey`, tagged `tag`,
    /// into a region whose first bytes are `prefix`. Nothing is posted until
    /// [`Reader::pump`].
    pub fn start(&mut self, tag: u32, addr: u64, rkey: u32, len: u32, prefix: &[u8]) {
        self.start_pieces(tag, prefix, &[Piece::Remote { addr, rkey, len }]);
    }

    /// Queues a read of a message made of `pieces` (a gather list: its Reads are
    /// posted together, each into its place), tagged `tag`, into one region whose
    /// first bytes are `prefix`. Nothing is posted until [`Reader::pump`].
    pub fn start_pieces(&mut self, tag: u32, prefix: &[u8], pieces: &[Piece<'_>]) {
        let mut inline = prefix.to_vec();
        let mut inline_at = vec![(0, prefix.len())];
        let mut remote = Vec::with_capacity(pieces.len());
        let mut at = prefix.len();
        for p in pieces {
            match *p {
                Piece::Inline(b) => {
                    inline_at.push((at, b.len()));
                    inline.extend_from_slice(b);
                    at += b.len();
                }
                Piece::Remote { addr, rkey, len } => {
                    remote.push(Remote {
                        addr,
                        rkey,
                        len,
                        at,
                    });
                    at += len as usize;
                }
            }
        }
        let largest = remote.iter().max_by_key(|r| r.len).map(|r| (r.addr, r.at));
        self.waiting.push_back(Waiting {
            tag,
            len: at,
            largest,
            inline,
            inline_at,
            remote,
            ticket: None,
        });
    }

    /// Takes regions for waiting reads (in order; `cx`'s waker is woken when the
    /// pool has room again for the first that found none) and posts Reads while
    /// the WR budget lasts. An `Err` is a refused post: the QP is unusable.
    pub fn pump(&mut self, cx: &mut Context<'_>) -> Result<()> {
        while let Some(w) = self.waiting.front_mut() {
            let ticket = match &mut w.ticket {
                Some(t) => t,
                None => match self.pool.request(w.len + COPY_ALIGN as usize - 1) {
                    Ok(t) => w.ticket.insert(t),
                    Err(e) => {
                        let w = self.waiting.pop_front().expect("front");
                        self.done
                            .push_back((w.tag, Err(ReadError::TooLarge(too_large(e)))));
                        continue;
                    }
                },
            };
            let region = match std::pin::Pin::new(ticket).poll_take(cx) {
                None => break,
                Some(r) => r?,
            };
            let mut w = self.waiting.pop_front().expect("front");
            let mut region = region;
            let pad = w
                .largest
                .map_or(0, |(addr, at)| align(addr, region.addr() + at as u64));
            let buf = region.buf_mut();
            let mut from = 0;
            for &(at, n) in &w.inline_at {
                buf[pad + at..pad + at + n].copy_from_slice(&w.inline[from..from + n]);
                from += n;
            }
            for r in &mut w.remote {
                r.at += pad;
            }
            self.active.push_back(Active {
                tag: w.tag,
                len: w.len,
                pad,
                region,
                remote: w.remote,
                next: 0,
                posted: 0,
                outstanding: 0,
                failed: None,
                _in_flight: InFlight::new(w.len),
            });
        }
        self.post_reads()?;
        // A message of inline runs only (never sent, but harmless) is done at once.
        self.finish_ready();
        Ok(())
    }

    fn post_reads(&mut self) -> Result<()> {
        for i in 0..self.active.len() {
            loop {
                let a = &self.active[i];
                if self.wrs >= self.max_wrs || a.failed.is_some() || a.all_posted() {
                    break;
                }
                let r = a.remote[a.next];
                let piece = (r.len - a.posted).min(self.max_piece);
                let sge = [a.region.sge(r.at + a.posted as usize, piece)];
                let wr = SendWr::new(
                    READ_BIT | u64::from(a.tag),
                    SendOp::RdmaRead {
                        remote_addr: r.addr + u64::from(a.posted),
                        rkey: r.rkey,
                    },
                    &sge,
                );
                // SAFETY: the SGE names `piece` bytes inside the region this read
                // holds (the region has room for the whole message, checked by the
                // pool's size, and each range's place lies inside it); the region
                // stays in `active`, untouched, until every Read posted into it
                // completed (`outstanding`), and only then is it handed out as bytes
                // or given back.
                unsafe { self.qp.post_send(&[wr])? };
                let a = &mut self.active[i];
                a.posted += piece;
                if a.posted == r.len {
                    a.next += 1;
                    a.posted = 0;
                }
                a.outstanding += 1;
                self.wrs += 1;
            }
        }
        Ok(())
    }

    /// Moves reads whose Reads all completed (or failed and drained) to `done`.
    fn finish_ready(&mut self) {
        let mut i = 0;
        while i < self.active.len() {
            if !self.finish_if_ready(i) {
                i += 1;
            }
        }
    }

    /// Moves read `i` to `done` if its Reads all completed (or failed and
    /// drained); whether it did.
    fn finish_if_ready(&mut self, i: usize) -> bool {
        let a = &self.active[i];
        if a.outstanding != 0 || (a.failed.is_none() && !a.all_posted()) {
            return false;
        }
        // Keeps the order (the oldest read usually finishes first: cheap at the
        // front). Filling the hole with the last one, as before, posted the newest
        // waiting read next: under steady load the oldest waited for seconds
        // (rpc-bench 64 KiB x 256: p99.9 1-3 s).
        let a = self.active.remove(i).expect("index checked above");
        let r = match a.failed {
            Some(s) => Err(ReadError::Failed(s)),
            None => Ok(a.region.into_bytes(a.pad + a.len).slice(a.pad..)),
        };
        self.done.push_back((a.tag, r));
        true
    }

    /// Handles a completion [`Reader::owns`]; a read whose Reads all completed
    /// becomes ready for [`Reader::poll_done`].
    pub fn handle_completion(&mut self, wc: &WorkCompletion) {
        let tag = (wc.wr_id & 0xffff_ffff) as u32;
        self.wrs = self.wrs.saturating_sub(1);
        let Some(i) = self.active.iter().position(|a| a.tag == tag) else {
            return;
        };
        let a = &mut self.active[i];
        a.outstanding -= 1;
        if !wc.is_ok() && a.failed.is_none() {
            a.failed = Some(wc.status);
        }
        self.finish_if_ready(i);
    }

    /// The next finished read: its tag and bytes (prefix then message), or why not.
    pub fn poll_done(&mut self) -> Option<(u32, std::result::Result<Bytes, ReadError>)> {
        self.done.pop_front()
    }

    /// Gives up every read (the connection is gone; its QP will post nothing more):
    /// their regions go back to the pool and their tags are returned.
    pub fn abandon(&mut self) -> Vec<u32> {
        let mut tags: Vec<u32> = self.waiting.drain(..).map(|w| w.tag).collect();
        tags.extend(self.active.drain(..).map(|a| a.tag));
        self.wrs = 0;
        tags
    }
}

fn too_large(e: Error) -> String {
    match e {
        Error::InvalidArgument(m) => m,
        e => e.to_string(),
    }
}

impl Ticket {
    /// Polls for the region with `cx`'s waker registered (woken when it may be
    /// served).
    pub fn poll_take(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Option<Result<PooledRegion>> {
        match std::future::Future::poll(self, cx) {
            std::task::Poll::Ready(r) => Some(r),
            std::task::Poll::Pending => None,
        }
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("waiting", &self.waiting.len())
            .field("active", &self.active.len())
            .field("wrs", &self.wrs)
            .finish()
    }
}
