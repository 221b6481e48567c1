//! `SendRing`: registered send slots owned by one QP.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::access::AccessFlags;
use crate::error::{Error, Result};
use crate::mr::MemoryRegion;
use crate::pd::ProtectionDomain;
use crate::qp::QueuePair;
use crate::wc::{WcStatus, WorkCompletion};
use crate::wr::{SendFlags, SendOp, SendWr, Sge};

use super::imm_mode::ImmMode;

static NEXT_RING_ID: AtomicU32 = AtomicU32::new(1);

/// A slot taken from a [`SendRing`], writable through [`SendRing::buf`] until it is
/// posted or released. Not `Clone`: holding it is the right to write the slot.
#[derive(Debug)]
#[must_use = "post or release the slot"]
pub struct SendSlot {
    ring: u32,
    idx: u32,
}

/// `n` send slots of `slot_size` bytes in registered regions, posted on one QP.
///
/// The ring starts with one region and [`SendRing::grow`] adds more (a connection's
/// send memory grows with its credit window instead of being sized for the largest
/// window up front). A slot index names its region in its top bits.
///
/// Each frame carries a 32-bit immediate, as a Send with Immediate or, in
/// [`ImmMode::Header`], as a header the ring writes before the payload (so
/// [`SendRing::buf`] starts 4 bytes into the slot and holds 4 bytes fewer).
///
/// Every posted slot stays owned by the ring (unwritable) until a completion covers
/// it, which is what makes [`SendRing::post`] safe. Selective signaling: one WR in
/// `signal_every` asks for a completion, and so does the post that leaves the ring
/// with no free slot, so a full ring always has a completion coming that frees it.
pub struct SendRing {
    // Field order: the QP (which may still read the slots) goes before the memory.
    qp: Arc<QueuePair>,
    /// Region `k` holds the slots whose index has `k` in its top bits.
    mrs: Vec<MemoryRegion>,
    /// Slots in all regions.
    capacity: usize,
    id: u32,
    /// Registered bytes per slot (header included).
    stride: usize,
    /// Bytes at the head of each slot taken by the immediate header (0 or 4).
    hdr: usize,
    /// Payload bytes per slot: `stride - hdr`.
    payload: usize,
    free: Vec<u32>,
    /// Posted slots in post order, with whether each asked for a completion.
    in_flight: VecDeque<(u32, bool)>,
    unsignaled: u32,
    signal_every: u32,
    max_inline: usize,
    /// Posts held back by [`SendRing::cork`]: (slot, length on the wire, immediate).
    held: Vec<(u32, usize, u32)>,
    corked: bool,
}

/// WRs per post list when a cork is pulled: one doorbell (one `send` on the soft
/// provider) per this many frames.
const FLUSH_CHUNK: usize = 32;

/// Bits of a slot index that number the slot inside its region.
const SEG_SHIFT: u32 = 20;
const SEG_MASK: u32 = (1 << SEG_SHIFT) - 1;

impl SendRing {
    /// Registers `n` slots of `slot_size` bytes in `pd` for Sends with Immediate on
    /// `qp`.
    pub fn new(
        pd: &ProtectionDomain,
        qp: Arc<QueuePair>,
        n: u32,
        slot_size: usize,
    ) -> Result<SendRing> {
        SendRing::with_mode(pd, qp, n, slot_size, ImmMode::Immediate)
    }

    /// Registers `n` slots of `slot_size` bytes in `pd` for sends on `qp` whose
    /// immediates travel as `mode` says.
    pub fn with_mode(
        pd: &ProtectionDomain,
        qp: Arc<QueuePair>,
        n: u32,
        slot_size: usize,
        mode: ImmMode,
    ) -> Result<SendRing> {
        if n == 0 || slot_size == 0 || n > qp.cap().max_send_wr {
            return Err(Error::InvalidArgument(format!(
                "send ring of {n} slots on a QP with {} send WRs",
                qp.cap().max_send_wr
            )));
        }
        let hdr = mode.header_len();
        if slot_size < hdr {
            return Err(Error::InvalidArgument(format!(
                "{slot_size}-byte send slots cannot hold the {hdr}-byte immediate header"
            )));
        }
        let mr = pd.alloc_mr(n as usize * slot_size, AccessFlags::empty())?;
        let max_inline = qp.cap().max_inline_data as usize;
        Ok(SendRing {
            qp,
            mrs: vec![mr],
            capacity: n as usize,
            id: NEXT_RING_ID.fetch_add(1, Ordering::Relaxed),
            stride: slot_size,
            hdr,
            payload: slot_size - hdr,
            free: (0..n).rev().collect(),
            in_flight: VecDeque::with_capacity(n as usize),
            unsignaled: 0,
            signal_every: (n / 4).max(1),
            max_inline,
            held: Vec::new(),
            corked: false,
        })
    }

    /// Slots in all its regions.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Registers `extra` more slots in a new region (at most the QP's send WRs in
    /// all). The ring's first slots keep their place: slots in flight are untouched.
    pub fn grow(&mut self, pd: &ProtectionDomain, extra: u32) -> Result<()> {
        let total = self.capacity() + extra as usize;
        if extra == 0
            || total > self.qp.cap().max_send_wr as usize
            || self.mrs.len() >= (1 << (32 - SEG_SHIFT))
            || extra > SEG_MASK
        {
            return Err(Error::InvalidArgument(format!(
                "send ring of {total} slots on a QP with {} send WRs",
                self.qp.cap().max_send_wr
            )));
        }
        let mr = pd.alloc_mr(extra as usize * self.stride, AccessFlags::empty())?;
        let seg = (self.mrs.len() as u32) << SEG_SHIFT;
        // Exactly the regions the ring has: it grows a few times in its life, and a
        // list with room for four is one more size of chunk per connection (see
        // `crate::heap`).
        self.mrs.reserve_exact(1);
        self.mrs.push(mr);
        self.capacity = total;
        self.free.extend((0..extra).rev().map(|i| seg | i));
        self.signal_every = (total as u32 / 4).max(1);
        Ok(())
    }

    /// The region and byte offset of slot `idx`.
    fn place(&self, idx: u32) -> (&MemoryRegion, usize) {
        (
            &self.mrs[(idx >> SEG_SHIFT) as usize],
            (idx & SEG_MASK) as usize * self.stride,
        )
    }

    /// The QP the ring posts on.
    pub fn qp(&self) -> &Arc<QueuePair> {
        &self.qp
    }

    /// Payload bytes per slot: what [`SendRing::buf`] holds (in
    /// [`ImmMode::Header`], 4 fewer than each slot registers).
    pub fn slot_size(&self) -> usize {
        self.payload
    }

    /// Where the ring's immediates travel.
    pub fn imm_mode(&self) -> ImmMode {
        if self.hdr == 0 {
            ImmMode::Immediate
        } else {
            ImmMode::Header
        }
    }

    /// Slots neither in flight nor handed out.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Takes a free slot, if any (reap completions to free more).
    pub fn acquire(&mut self) -> Option<SendSlot> {
        self.free.pop().map(|idx| SendSlot { ring: self.id, idx })
    }

    /// The slot's payload bytes, to encode into ([`SendRing::slot_size`] of them).
    ///
    /// # Panics
    /// If `slot` belongs to another ring.
    pub fn buf(&mut self, slot: &SendSlot) -> &mut [u8] {
        assert_eq!(slot.ring, self.id, "slot of another ring");
        // SAFETY: `slot` was handed out by `acquire` and not posted since (posting
        // consumes it), so no WR names this range; `&mut self` and the non-Clone slot
        // make this the only reference to it.
        unsafe {
            let (mr, off) = self.place(slot.idx);
            mr.slice_mut(off + self.hdr, self.payload)
        }
    }

    /// Gives an unused slot back.
    pub fn release(&mut self, slot: SendSlot) {
        assert_eq!(slot.ring, self.id, "slot of another ring");
        self.free.push(slot.idx);
    }

    /// Posts the first `len` bytes of `slot`'s payload with immediate `imm` (inline
    /// when small): a Send with Immediate, or in [`ImmMode::Header`] a Send of the
    /// header and the payload, `len + 4` bytes. The slot comes back once a completion
    /// covering it is reaped through [`SendRing::handle_completion`]. On a refused
    /// post it comes back now.
    pub fn post(&mut self, slot: SendSlot, len: usize, imm: u32) -> Result<()> {
        let frame = self.frame(slot, len, imm);
        if self.corked {
            self.held.push(frame);
            return Ok(());
        }
        self.post_list(&[frame])
    }

    /// Holds this one post back for the next [`SendRing::uncork`], corked or not: a
    /// client with many calls in flight lets its driver post the requests of a burst
    /// of callers as one list. Checked as [`SendRing::post`] checks.
    pub fn hold(&mut self, slot: SendSlot, len: usize, imm: u32) {
        let frame = self.frame(slot, len, imm);
        self.held.push(frame);
    }

    /// Checks that `slot` is this ring's and `len` fits it, and writes the header in
    /// header mode: (slot, length on the wire, immediate).
    #[inline]
    fn frame(&mut self, slot: SendSlot, len: usize, imm: u32) -> (u32, usize, u32) {
        assert_eq!(slot.ring, self.id, "slot of another ring");
        assert!(
            len <= self.payload,
            "{len} bytes do not fit a {}-byte slot",
            self.payload
        );
        if self.hdr != 0 {
            self.write_header(&slot, imm);
        }
        (slot.idx, len + self.hdr, imm)
    }

    /// Header mode: the immediate, in network order, at the head of the slot. Out of
    /// line so that the immediate path's `frame` stays small.
    #[cold]
    #[inline(never)]
    fn write_header(&mut self, slot: &SendSlot, imm: u32) {
        let (mr, off) = self.place(slot.idx);
        // SAFETY: as in `buf`: the slot is held, not posted, so nothing else reads or
        // writes its bytes.
        let head = unsafe { mr.slice_mut(off, 4) };
        head.copy_from_slice(&imm.to_be_bytes());
    }

    /// Posts held back by [`SendRing::hold`] or a cork wait for [`SendRing::uncork`].
    pub fn holds(&self) -> bool {
        !self.held.is_empty()
    }

    /// Holds back posts until [`SendRing::uncork`], which posts them as one WR list:
    /// a server that answers a batch of requests rings the doorbell (on the soft
    /// provider: makes one `send` syscall) once per batch instead of once per reply.
    /// Held slots count as posted; nothing reaches the QP until the cork is pulled.
    pub fn cork(&mut self) {
        self.corked = true;
    }

    /// Ends a cork and posts everything held (since [`SendRing::cork`], and by
    /// [`SendRing::hold`]), in order. On a refused post the
    /// slots not posted come back now, as with [`SendRing::post`].
    pub fn uncork(&mut self) -> Result<()> {
        self.corked = false;
        let held = std::mem::take(&mut self.held);
        let mut r = Ok(());
        let mut chunks = held.chunks(FLUSH_CHUNK);
        for chunk in chunks.by_ref() {
            r = self.post_list(chunk);
            if r.is_err() {
                break;
            }
        }
        for chunk in chunks {
            self.free.extend(chunk.iter().map(|&(idx, ..)| idx));
        }
        // Keep the buffer's capacity for the next cork.
        self.held = held;
        self.held.clear();
        r
    }

    fn post_list(&mut self, frames: &[(u32, usize, u32)]) -> Result<()> {
        let n = frames.len().min(FLUSH_CHUNK);
        // One frame (a unary call's) zeroes one SGE, not a whole chunk's.
        let mut one_sge = [Sge::default()];
        let mut chunk_sges;
        let sges: &mut [Sge] = if n == 1 {
            &mut one_sge
        } else {
            chunk_sges = [Sge::default(); FLUSH_CHUNK];
            &mut chunk_sges
        };
        let mut signaled = [false; FLUSH_CHUNK];
        let mut unsignaled = self.unsignaled;
        for (k, &(idx, len, _)) in frames[..n].iter().enumerate() {
            let (mr, off) = self.place(idx);
            sges[k] = mr.sge(off, len as u32);
            // The last frame of a list that leaves no slot free always asks for a
            // completion, so a full ring has one coming that frees it.
            signaled[k] =
                unsignaled + 1 >= self.signal_every || (k + 1 == n && self.free.is_empty());
            unsignaled = if signaled[k] { 0 } else { unsignaled + 1 };
        }
        let wr = |k: usize| {
            let (idx, len, imm) = frames[k];
            let mut flags = SendFlags::empty();
            if signaled[k] {
                flags |= SendFlags::SIGNALED;
            }
            if len <= self.max_inline {
                flags |= SendFlags::INLINE;
            }
            let sg: &[Sge] = if len == 0 { &[] } else { &sges[k..k + 1] };
            let op = if self.hdr == 0 {
                SendOp::SendWithImm { imm }
            } else {
                SendOp::Send
            };
            SendWr::new(u64::from(idx), op, sg).flags(flags)
        };
        // SAFETY (both posts): each SGE names `len` bytes of this ring's own live
        // region; the slots go into `in_flight` and are neither handed out nor written
        // (`buf` needs a `SendSlot`, which no one holds) until a signaled completion at
        // or after them is reaped, or the QP, which the ring owns and drops before the
        // region, is gone.
        let r = if n == 1 {
            // SAFETY: see above.
            unsafe { self.qp.post_send(&[wr(0)]) }
        } else {
            let mut wrs = [wr(0); FLUSH_CHUNK];
            for (k, w) in wrs.iter_mut().enumerate().take(n).skip(1) {
                *w = wr(k);
            }
            // SAFETY: see above.
            unsafe { self.qp.post_send(&wrs[..n]) }
        };
        let posted = match &r {
            Ok(()) => n,
            Err(Error::Post { index, .. }) => (*index).min(n),
            Err(_) => 0,
        };
        for k in 0..n {
            let idx = frames[k].0;
            if k < posted {
                self.in_flight.push_back((idx, signaled[k]));
                self.unsignaled = if signaled[k] { 0 } else { self.unsignaled + 1 };
            } else {
                self.free.push(idx);
            }
        }
        r
    }

    /// Frees the slots a send completion of this ring's QP covers: the signaled slot
    /// it names and every slot posted before it. Returns the completion's status.
    pub fn handle_completion(&mut self, wc: &WorkCompletion) -> WcStatus {
        let idx = wc.wr_id as u32;
        if self.in_flight.iter().any(|(i, _)| *i == idx) {
            while let Some((i, _)) = self.in_flight.pop_front() {
                self.free.push(i);
                if i == idx {
                    break;
                }
            }
        }
        wc.status
    }

    /// Whether posted slots wait for completions.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

impl std::fmt::Debug for SendRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendRing")
            .field("slot_size", &self.payload)
            .field("free", &self.free.len())
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}
