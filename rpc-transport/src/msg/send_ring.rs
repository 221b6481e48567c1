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

static NEXT_RING_ID: AtomicU32 = AtomicU32::new(1);

/// A slot taken from a [`SendRing`], writable through [`SendRing::buf`] until it is
/// posted or released. Not `Clone`: holding it is the right to write the slot.
#[derive(Debug)]
#[must_use = "post or release the slot"]
pub struct SendSlot {
    ring: u32,
    idx: u32,
}

/// `n` send slots of `slot_size` bytes in one registered region, posted on one QP.
///
/// Every posted slot stays owned by the ring (unwritable) until a completion covers
/// it, which is what makes [`SendRing::post`] safe. Selective signaling: one WR in
/// `signal_every` asks for a completion, and so does the post that leaves the ring
/// with no free slot, so a full ring always has a completion coming that frees it.
pub struct SendRing {
    // Field order: the QP (which may still read the slots) goes before the memory.
    qp: Arc<QueuePair>,
    mr: MemoryRegion,
    id: u32,
    slot_size: usize,
    free: Vec<u32>,
    /// Posted slots in post order, with whether each asked for a completion.
    in_flight: VecDeque<(u32, bool)>,
    unsignaled: u32,
    signal_every: u32,
    max_inline: usize,
}

impl SendRing {
    /// Registers `n` slots of `slot_size` bytes in `pd` for sends on `qp`.
    pub fn new(
        pd: &ProtectionDomain,
        qp: Arc<QueuePair>,
        n: u32,
        slot_size: usize,
    ) -> Result<SendRing> {
        if n == 0 || slot_size == 0 || n > qp.cap().max_send_wr {
            return Err(Error::InvalidArgument(format!(
                "send ring of {n} slots on a QP with {} send WRs",
                qp.cap().max_send_wr
            )));
        }
        let mr = pd.alloc_mr(n as usize * slot_size, AccessFlags::empty())?;
        let max_inline = qp.cap().max_inline_data as usize;
        Ok(SendRing {
            qp,
            mr,
            id: NEXT_RING_ID.fetch_add(1, Ordering::Relaxed),
            slot_size,
            free: (0..n).rev().collect(),
            in_flight: VecDeque::with_capacity(n as usize),
            unsignaled: 0,
            signal_every: (n / 4).max(1),
            max_inline,
        })
    }

    /// The QP the ring posts on.
    pub fn qp(&self) -> &Arc<QueuePair> {
        &self.qp
    }

    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Slots neither in flight nor handed out.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Takes a free slot, if any (reap completions to free more).
    pub fn acquire(&mut self) -> Option<SendSlot> {
        self.free.pop().map(|idx| SendSlot { ring: self.id, idx })
    }

    /// The slot's bytes, to encode into.
    ///
    /// # Panics
    /// If `slot` belongs to another ring.
    pub fn buf(&mut self, slot: &SendSlot) -> &mut [u8] {
        assert_eq!(slot.ring, self.id, "slot of another ring");
        // SAFETY: `slot` was handed out by `acquire` and not posted since (posting
        // consumes it), so no WR names this range; `&mut self` and the non-Clone slot
        // make this the only reference to it.
        unsafe {
            self.mr
                .slice_mut(slot.idx as usize * self.slot_size, self.slot_size)
        }
    }

    /// Gives an unused slot back.
    pub fn release(&mut self, slot: SendSlot) {
        assert_eq!(slot.ring, self.id, "slot of another ring");
        self.free.push(slot.idx);
    }

    /// Posts the first `len` bytes of `slot` as a Send with immediate `imm` (inline
    /// when small). The slot comes back once a completion covering it is reaped
    /// through [`SendRing::handle_completion`]. On a refused post it comes back now.
    pub fn post(&mut self, slot: SendSlot, len: usize, imm: u32) -> Result<()> {
        assert_eq!(slot.ring, self.id, "slot of another ring");
        assert!(
            len <= self.slot_size,
            "{len} bytes do not fit a {}-byte slot",
            self.slot_size
        );
        let signaled = self.unsignaled + 1 >= self.signal_every || self.free.is_empty();
        let mut flags = SendFlags::empty();
        if signaled {
            flags |= SendFlags::SIGNALED;
        }
        if len <= self.max_inline {
            flags |= SendFlags::INLINE;
        }
        let sge = [self.mr.sge(slot.idx as usize * self.slot_size, len as u32)];
        let sg_list: &[Sge] = if len == 0 { &[] } else { &sge };
        let wr =
            SendWr::new(u64::from(slot.idx), SendOp::SendWithImm { imm }, sg_list).flags(flags);
        // SAFETY: the SGE names `len` bytes of this ring's own live region; the slot
        // goes into `in_flight` and is neither handed out nor written (`buf` needs a
        // `SendSlot`, which no one holds) until a signaled completion at or after it
        // is reaped, or the QP, which the ring owns and drops before the region, is gone.
        match unsafe { self.qp.post_send(&[wr]) } {
            Ok(()) => {
                self.in_flight.push_back((slot.idx, signaled));
                self.unsignaled = if signaled { 0 } else { self.unsignaled + 1 };
                Ok(())
            }
            Err(e) => {
                self.free.push(slot.idx);
                Err(e)
            }
        }
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
            .field("slot_size", &self.slot_size)
            .field("free", &self.free.len())
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}
