//! The RDMA side: one RC QP per process, Send/Receive, both sides busy-polling one CQ.
//!
//! The server echoes each ping-pong message straight from the receive slot it landed
//! in (no copy), and reposts the slot once the echo's send completes. In the streaming
//! phase it reposts each slot at once and answers the last message with a 1-byte Send.

use std::time::{Duration, Instant};

use rpc_transport::{
    AccessFlags, CompletionQueue, Device, MemoryRegion, ProviderKind, QpCap, QpInitAttr, QpType,
    QueuePair, RecvWr, SendFlags, SendOp, SendWr, WcOpcode, WorkCompletion,
};

use crate::oob::{Oob, Params};
use crate::stats::Summary;
use crate::Result;

/// `wr_id` of a receive: `RECV | slot`; of a send: `SEND | slot` (slot 0 for the
/// client's only send buffer).
const RECV: u64 = 1 << 32;
const SEND: u64 = 2 << 32;
const SLOT_MASK: u64 = 0xffff_ffff;
/// `wr_id` of the server's reply to the last streamed message: it frees no ring slot.
const REPLY: u64 = SEND | SLOT_MASK;
/// Largest inline payload the tool asks for with `--inline`.
const MAX_INLINE_ASK: u32 = 256;

/// Everything one side needs: its QP, the CQ for both directions and its memory.
struct Link {
    // Declared first so it is destroyed before the memory its WRs name.
    qp: QueuePair,
    cq: CompletionQueue,
    /// Receive ring of `slots` × `size` bytes.
    ring: MemoryRegion,
    /// What the client sends (and the server's final 1-byte reply).
    out: MemoryRegion,
    slots: usize,
    size: u32,
    /// Whether sends go inline (`--inline` and `size` ≤ granted max_inline_data).
    inline: bool,
    psn: u32,
    dev: Device,
}

impl Link {
    fn open(device: &str, p: Params) -> Result<Link> {
        let dev = Device::open(device)?;
        let pd = dev.alloc_pd()?;
        // Twice the window, so reposting can lag the sender a little without RNR.
        let slots = (2 * p.window as usize).max(16);
        let cq = dev.create_cq(2 * slots as u32 + 16)?;
        let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
        init.cap = QpCap {
            max_send_wr: slots as u32 + 1,
            max_recv_wr: slots as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: if p.inline {
                p.size.min(MAX_INLINE_ASK)
            } else {
                0
            },
        };
        let qp = pd.create_qp(&init)?;
        let inline = p.inline && p.size <= qp.cap().max_inline_data;
        let ring = pd.alloc_mr(slots * p.size as usize, AccessFlags::LOCAL_WRITE)?;
        let out = pd.alloc_mr(p.size as usize, AccessFlags::LOCAL_WRITE)?;
        out.write(0, &vec![0xa5; p.size as usize]);
        // ibv_rc_pingpong draws its PSN at random; any 24-bit value will do.
        let nanos = std::time::SystemTime::UNIX_EPOCH
            .elapsed()
            .map_or(0, |d| d.subsec_nanos());
        let psn = nanos ^ std::process::id();
        Ok(Link {
            qp,
            cq,
            ring,
            out,
            slots,
            size: p.size,
            inline,
            psn: psn & 0xff_ffff,
            dev,
        })
    }

    /// Trades `LID:QPN:PSN:GID` with the peer and brings the QP to RTS; the server
    /// posts its receives before it answers, so the client may send at once.
    fn connect(&self, oob: &mut Oob, server: bool) -> Result<()> {
        let local = self.qp.endpoint(self.psn)?;
        let remote = if server {
            let remote = oob.recv_endpoint()?;
            self.qp
                .connect_rc(&remote, self.psn, AccessFlags::empty())?;
            self.post_ring()?;
            oob.send_endpoint(&local)?;
            remote
        } else {
            oob.send_endpoint(&local)?;
            let remote = oob.recv_endpoint()?;
            self.qp
                .connect_rc(&remote, self.psn, AccessFlags::empty())?;
            self.post_ring()?;
            remote
        };
        tracing::debug!(%local, %remote, "connected");
        Ok(())
    }

    fn post_ring(&self) -> Result<()> {
        (0..self.slots).try_for_each(|i| self.post_recv(i))
    }

    fn post_recv(&self, slot: usize) -> Result<()> {
        let sge = [self.ring.sge(slot * self.size as usize, self.size)];
        let wr = RecvWr {
            wr_id: RECV | slot as u64,
            sg_list: &sge,
        };
        // SAFETY: the slot belongs to `ring`, which outlives the QP (field order); the
        // tool reads a slot only after its receive completed and reposts it only after
        // any echo sent from it completed.
        unsafe { self.qp.post_recv(&[wr]) }?;
        Ok(())
    }

    /// Sends `len` bytes of `mr` at `off` with `wr_id`.
    fn post_send(&self, mr: &MemoryRegion, off: usize, len: u32, wr_id: u64) -> Result<()> {
        let sge = [mr.sge(off, len)];
        let mut flags = SendFlags::SIGNALED;
        if self.inline && len <= self.size {
            flags |= SendFlags::INLINE;
        }
        let wr = SendWr::new(wr_id, SendOp::Send, &sge).flags(flags);
        // SAFETY: `mr` is `out` (never written after setup) or a ring slot that is not
        // reposted as a receive until this send completes; both outlive the QP.
        unsafe { self.qp.post_send(&[wr]) }?;
        Ok(())
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
}

fn slot_of(wc: &WorkCompletion) -> usize {
    (wc.wr_id & SLOT_MASK) as usize
}

/// Client: connects, runs the ping-pong and streaming phases, and summarises them.
pub(crate) fn client(device: &str, p: Params, oob: &mut Oob) -> Result<(ProviderKind, Summary)> {
    let link = Link::open(device, p)?;
    link.connect(oob, false)?;
    let mut rtts = ping_pong(&link, p)?;
    let elapsed = stream(&link, p)?;
    // Keep the QP until the server has seen its last send acknowledged: destroying it
    // at once could drop that acknowledgement (ibv_rc_pingpong syncs the same way).
    oob.expect_word("RDMA-DONE")?;
    let bytes = u64::from(p.iters) * u64::from(p.size);
    Ok((link.dev.provider(), Summary::new(&mut rtts, bytes, elapsed)))
}

fn ping_pong(link: &Link, p: Params) -> Result<Vec<Duration>> {
    let mut wc = [WorkCompletion::default(); 16];
    let mut rtts = Vec::with_capacity(p.iters as usize);
    let mut sends_in_flight = 0usize;
    for i in 0..p.warmup + p.iters {
        let start = Instant::now();
        link.post_send(&link.out, 0, link.size, SEND)?;
        sends_in_flight += 1;
        let mut echoed = false;
        // The send's own completion may trail the echo; reap it whenever it comes, but
        // never let the send queue fill.
        while !echoed || sends_in_flight >= link.slots {
            for w in link.poll(&mut wc)? {
                if w.opcode == WcOpcode::Send {
                    sends_in_flight -= 1;
                } else {
                    if w.byte_len != link.size {
                        return Err(
                            format!("echo of {} bytes, sent {}", w.byte_len, link.size).into()
                        );
                    }
                    link.post_recv(slot_of(w))?;
                    echoed = true;
                }
            }
        }
        if i >= p.warmup {
            rtts.push(start.elapsed());
        }
    }
    Ok(rtts)
}

/// Streams `iters` messages with at most `window` outstanding; returns the time until
/// the server's reply to the last one.
fn stream(link: &Link, p: Params) -> Result<Duration> {
    let mut wc = [WorkCompletion::default(); 16];
    let (mut posted, mut completed) = (0u32, 0u32);
    let mut replied = None;
    let start = Instant::now();
    while replied.is_none() || completed < posted {
        while posted < p.iters && posted - completed < p.window {
            link.post_send(&link.out, 0, link.size, SEND)?;
            posted += 1;
        }
        for w in link.poll(&mut wc)? {
            if w.opcode == WcOpcode::Send {
                completed += 1;
            } else {
                replied = Some(start.elapsed());
                link.post_recv(slot_of(w))?;
            }
        }
    }
    Ok(replied.unwrap_or_default())
}

/// Server: connects, echoes `warmup + iters` messages, then counts `iters` streamed
/// messages and replies to the last.
pub(crate) fn serve(device: &str, p: Params, oob: &mut Oob) -> Result<()> {
    let link = Link::open(device, p)?;
    link.connect(oob, true)?;
    let echoes = u64::from(p.warmup + p.iters);
    let total = echoes + u64::from(p.iters);
    let mut wc = [WorkCompletion::default(); 16];
    let (mut received, mut sends_in_flight) = (0u64, 0usize);
    let mut replied = false;
    while !replied || sends_in_flight > 0 {
        for w in link.poll(&mut wc)? {
            let slot = slot_of(w);
            match w.opcode {
                WcOpcode::Send => {
                    sends_in_flight -= 1;
                    if w.wr_id != REPLY {
                        link.post_recv(slot)?;
                    }
                }
                _ if received < echoes => {
                    received += 1;
                    let off = slot * link.size as usize;
                    link.post_send(&link.ring, off, w.byte_len, SEND | slot as u64)?;
                    sends_in_flight += 1;
                }
                _ => {
                    received += 1;
                    link.post_recv(slot)?;
                    if received == total {
                        link.post_send(&link.out, 0, 1, REPLY)?;
                        sends_in_flight += 1;
                        replied = true;
                    }
                }
            }
        }
    }
    oob.send_word("RDMA-DONE")
}
