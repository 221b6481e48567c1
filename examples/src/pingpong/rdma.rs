//! The RDMA side: one RC QP per process, Send-with-Immediate/Receive, both sides
//! busy-polling one CQ.
//!
//! Built on the safe message layer ([`SendRing`], [`RecvPool`]), so the tool posts
//! no work request itself: the ring owns the send buffers and the pool the receive
//! buffers, each handing them out only while no work request names them. Sends are selectively
//! signaled (the ring's policy), so a send completion may free several slots.
//!
//! The server copies each ping-pong message from the receive slot it landed in into
//! a send slot and echoes that, with the same immediate (the client checks it). In
//! the streaming phase it reposts each receive at once (batched per poll) and
//! answers the last message with a 1-byte Send.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_transport::msg::{RecvPool, RecvSlot, RecvTarget, SendRing, SendSlot};
use rpc_transport::{
    AccessFlags, CompletionQueue, Device, ProviderKind, QpCap, QpInitAttr, QpType, WcOpcode,
    WorkCompletion,
};

use crate::oob::{Oob, Params};
use crate::stats::Summary;
use crate::Result;

/// Largest inline payload the tool asks for with `--inline`.
const MAX_INLINE_ASK: u32 = 256;
/// Immediate of the server's reply to the last streamed message.
const REPLY_IMM: u32 = u32::MAX;

/// Everything one side needs: its QP (shared by the ring and the pool), the CQ for
/// both directions and the buffers.
struct Link {
    // Field order: the ring and the pool each drop their handle on the QP before
    // their memory; the QP goes with the last handle, before the CQ and the device.
    /// `window` send slots of `size` bytes: at most `window` sends in flight.
    ring: SendRing,
    /// Receive slots of `size` bytes on the QP's own receive queue.
    pool: RecvPool,
    cq: CompletionQueue,
    size: u32,
    dev: Device,
}

impl Link {
    /// Creates the QP, trades `LID:QPN:PSN:GID` with the peer, brings the QP to RTS
    /// and posts the receives; the server posts them before it answers, so the
    /// client may send at once.
    fn connect(device: &str, p: Params, oob: &mut Oob, server: bool) -> Result<Link> {
        let dev = Device::open(device)?;
        let pd = dev.alloc_pd()?;
        // Twice the window, so reposting can lag the sender a little without RNR.
        let slots = (2 * p.window).max(16);
        let cq = dev.create_cq(2 * slots + 16)?;
        let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
        init.cap = QpCap {
            max_send_wr: slots + 1,
            max_recv_wr: slots,
            max_send_sge: 1,
            max_recv_sge: 1,
            // The ring sends inline whatever fits the granted max_inline_data.
            max_inline_data: if p.inline {
                p.size.min(MAX_INLINE_ASK)
            } else {
                0
            },
        };
        let qp = Arc::new(pd.create_qp(&init)?);
        let mut ring = SendRing::new(&pd, qp.clone(), p.window, p.size as usize)?;
        // The client's payload, written once: slots keep their bytes across sends.
        let held: Vec<SendSlot> = std::iter::from_fn(|| ring.acquire()).collect();
        for s in held {
            ring.buf(&s).fill(0xa5);
            ring.release(s);
        }

        // ibv_rc_pingpong draws its PSN at random; any 24-bit value will do.
        let nanos = std::time::SystemTime::UNIX_EPOCH
            .elapsed()
            .map_or(0, |d| d.subsec_nanos());
        let psn = (nanos ^ std::process::id()) & 0xff_ffff;
        let local = qp.endpoint(psn)?;
        let open_pool = || {
            RecvPool::new(
                &pd,
                RecvTarget::Qp(qp.clone()),
                slots,
                p.size as usize,
                None,
            )
        };
        let (remote, pool) = if server {
            let remote = oob.recv_endpoint()?;
            qp.connect_rc(&remote, psn, AccessFlags::empty())?;
            let pool = open_pool()?;
            oob.send_endpoint(&local)?;
            (remote, pool)
        } else {
            oob.send_endpoint(&local)?;
            let remote = oob.recv_endpoint()?;
            qp.connect_rc(&remote, psn, AccessFlags::empty())?;
            (remote, open_pool()?)
        };
        tracing::debug!(%local, %remote, inline_max = qp.cap().max_inline_data, "connected");
        drop(qp);
        Ok(Link {
            ring,
            pool,
            cq,
            size: p.size,
            dev,
        })
    }

    /// One busy poll: completions are returned, failures become errors.
    fn poll<'w>(&self, wc: &'w mut [WorkCompletion]) -> Result<&'w [WorkCompletion]> {
        let n = self.cq.poll(wc)?;
        for w in &wc[..n] {
            if !w.is_ok() {
                return Err(format!("work request {:#x} failed: {}", w.wr_id, w.status).into());
            }
        }
        Ok(&wc[..n])
    }

    /// A receive completion as its slot (reposted when dropped).
    fn received(&self, w: &WorkCompletion) -> Result<RecvSlot> {
        self.pool
            .complete(w)
            .map_err(|status| format!("receive {:#x} failed: {status}", w.wr_id).into())
    }

    /// Posts `slot` so that it asks for a completion, which then covers every send
    /// before it: the ring signals the post that leaves it with no free slot, so the
    /// other free slots are held across the post.
    fn post_signaled(&mut self, slot: SendSlot, len: usize, imm: u32) -> Result<()> {
        let held: Vec<SendSlot> = std::iter::from_fn(|| self.ring.acquire()).collect();
        let r = self.ring.post(slot, len, imm);
        for s in held {
            self.ring.release(s);
        }
        Ok(r?)
    }
}

/// Client: connects, runs the ping-pong and streaming phases, and summarises them.
pub(crate) fn client(device: &str, p: Params, oob: &mut Oob) -> Result<(ProviderKind, Summary)> {
    let mut link = Link::connect(device, p, oob, false)?;
    let mut rtts = ping_pong(&mut link, p)?;
    let elapsed = stream(&mut link, p)?;
    // Keep the QP until the server has seen its last send acknowledged: destroying it
    // at once could drop that acknowledgement (ibv_rc_pingpong syncs the same way).
    oob.expect_word("RDMA-DONE")?;
    let bytes = u64::from(p.iters) * u64::from(p.size);
    Ok((link.dev.provider(), Summary::new(&mut rtts, bytes, elapsed)))
}

fn ping_pong(link: &mut Link, p: Params) -> Result<Vec<Duration>> {
    let mut wc = [WorkCompletion::default(); 16];
    let mut rtts = Vec::with_capacity(p.iters as usize);
    for i in 0..p.warmup + p.iters {
        let start = Instant::now();
        // A full ring has a signaled send coming that frees it: reap until a slot is
        // free (the completions of earlier sends may trail their echoes).
        let slot = loop {
            if let Some(s) = link.ring.acquire() {
                break s;
            }
            for w in link.poll(&mut wc)? {
                if w.opcode != WcOpcode::Send {
                    return Err(format!("unexpected {:?} completion", w.opcode).into());
                }
                link.ring.handle_completion(w);
            }
        };
        link.ring.post(slot, link.size as usize, i)?;
        let mut echo = None;
        while echo.is_none() {
            for w in link.poll(&mut wc)? {
                if w.opcode == WcOpcode::Send {
                    link.ring.handle_completion(w);
                    continue;
                }
                let got = link.received(w)?;
                if got.len() != link.size as usize || w.imm_data != Some(i) {
                    return Err(format!(
                        "echo of {} bytes with immediate {:?}, sent {} with {i}",
                        got.len(),
                        w.imm_data,
                        link.size
                    )
                    .into());
                }
                echo = Some(got);
            }
        }
        if i >= p.warmup {
            rtts.push(start.elapsed());
        }
        // Reposts the receive, outside the timed round trip.
        drop(echo);
    }
    Ok(rtts)
}

/// Streams `iters` messages with at most `window` outstanding (the ring's slots);
/// returns the time until the server's reply to the last one. The last send is
/// signaled so that the phase ends with every send completed.
fn stream(link: &mut Link, p: Params) -> Result<Duration> {
    let mut wc = [WorkCompletion::default(); 16];
    let mut posted = 0u32;
    let mut replied = None;
    let start = Instant::now();
    while replied.is_none() || link.ring.in_flight() > 0 {
        while posted < p.iters {
            let Some(slot) = link.ring.acquire() else {
                break;
            };
            posted += 1;
            if posted == p.iters {
                link.post_signaled(slot, link.size as usize, posted)?;
            } else {
                link.ring.post(slot, link.size as usize, posted)?;
            }
        }
        for w in link.poll(&mut wc)? {
            if w.opcode == WcOpcode::Send {
                link.ring.handle_completion(w);
            } else {
                drop(link.received(w)?);
                replied = Some(start.elapsed());
            }
        }
    }
    Ok(replied.unwrap_or_default())
}

/// Server: connects, echoes `warmup + iters` messages, then counts `iters` streamed
/// messages and replies to the last.
pub(crate) fn serve(device: &str, p: Params, oob: &mut Oob) -> Result<()> {
    let mut link = Link::connect(device, p, oob, true)?;
    let echoes = u64::from(p.warmup + p.iters);
    let total = echoes + u64::from(p.iters);
    let mut wc = [WorkCompletion::default(); 16];
    // Messages to echo that wait for a free send slot, with their immediates.
    let mut waiting: VecDeque<(RecvSlot, Option<u32>)> = VecDeque::with_capacity(4);
    let mut received = 0u64;
    let mut replied = false;
    while !replied || link.ring.in_flight() > 0 {
        let done = link.poll(&mut wc)?;
        if done.is_empty() {
            continue;
        }
        // Receives freed in one poll are reposted as one post list, after the echoes.
        let pool = link.pool.clone();
        let _batch = pool.batch();
        for w in done {
            if w.opcode == WcOpcode::Send {
                link.ring.handle_completion(w);
                continue;
            }
            let msg = link.received(w)?;
            received += 1;
            if received <= echoes {
                waiting.push_back((msg, w.imm_data));
                continue;
            }
            drop(msg);
            if received == total {
                let slot = acquire(&mut link)?;
                link.post_signaled(slot, 1, REPLY_IMM)?;
                replied = true;
            }
        }
        while !waiting.is_empty() {
            let Some(slot) = link.ring.acquire() else {
                break;
            };
            let (msg, imm) = waiting.pop_front().expect("not empty");
            // The one copy of the echo path: the received bytes (--size, up to a
            // slot) into the send slot, so the receive slot can be reposted at once
            // (when the batch ends, after the echo is posted).
            link.ring.buf(&slot)[..msg.len()].copy_from_slice(msg.bytes());
            link.ring.post(slot, msg.len(), imm.unwrap_or(0))?;
        }
    }
    oob.send_word("RDMA-DONE")
}

/// A free send slot, reaping send completions until one is; only used once the
/// client has stopped sending, so no receive can come in meanwhile.
fn acquire(link: &mut Link) -> Result<SendSlot> {
    let mut wc = [WorkCompletion::default(); 16];
    loop {
        if let Some(s) = link.ring.acquire() {
            return Ok(s);
        }
        for w in link.poll(&mut wc)? {
            if w.opcode != WcOpcode::Send {
                return Err(format!("unexpected {:?} completion", w.opcode).into());
            }
            link.ring.handle_completion(w);
        }
    }
}
