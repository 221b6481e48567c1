//! Work queue entries as the provider stores them, and the send queue ring.

use crate::error::{Error, PostError};
use crate::wc::WcStatus;
use crate::wr::{RecvWr, SendFlags, SendOp, Sge};

use super::super::device::MAX_SGE;
use super::super::wrap::wrap;

/// A posted receive.
#[derive(Clone, Copy)]
pub(crate) struct RecvWqe {
    pub(crate) wr_id: u64,
    sges: [Sge; MAX_SGE],
    n: u8,
}

impl RecvWqe {
    /// No receive (a slot before it is filled).
    pub(crate) const EMPTY: RecvWqe = RecvWqe {
        wr_id: 0,
        sges: [Sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; MAX_SGE],
        n: 0,
    };

    /// The caller has checked `wr.sg_list.len() <= MAX_SGE`.
    pub(crate) fn new(wr: &RecvWr<'_>) -> RecvWqe {
        let mut w = RecvWqe::EMPTY;
        w.fill(wr.wr_id, wr.sg_list);
        w
    }

    /// Copies `wr_id` and `sges` in, SGE by SGE: a receive holds one or two, and a
    /// `copy_from_slice` of a length known only at run time is a `memmove` call.
    fn fill(&mut self, wr_id: u64, sges: &[Sge]) {
        self.wr_id = wr_id;
        for (to, from) in self.sges.iter_mut().zip(sges) {
            *to = *from;
        }
        self.n = sges.len() as u8;
    }

    /// Copies `from` into `self`: only its SGEs in use, not the whole array.
    pub(crate) fn copy_from(&mut self, from: &RecvWqe) {
        self.fill(from.wr_id, from.sges());
    }

    pub(crate) fn sges(&self) -> &[Sge] {
        &self.sges[..self.n as usize]
    }
}

/// Where a send WQE is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TxState {
    /// Not (fully) transmitted yet.
    Pending,
    /// Transmitted; waiting for an ACK or a response.
    Sent,
    /// Its response arrived (Reads and atomics).
    Done,
    /// Failed locally or remotely; completes with this status when it reaches the head.
    Failed(WcStatus),
}

/// A posted send.
#[derive(Clone, Copy)]
pub(crate) struct SendWqe {
    pub(crate) wr_id: u64,
    pub(crate) op: SendOp,
    pub(crate) flags: SendFlags,
    pub(crate) signaled: bool,
    sges: [Sge; MAX_SGE],
    n: u8,
    /// Total payload (or Read length) in bytes.
    pub(crate) len: u64,
    /// The payload was copied into the inline area of this WQE's slot.
    pub(crate) inline: bool,
    pub(crate) state: TxState,
    /// Message sequence number, assigned when transmission starts.
    pub(crate) seq: u32,
    /// Bytes transmitted so far (Send/Write) or received (Read response).
    pub(crate) done_bytes: u64,
}

impl SendWqe {
    pub(crate) fn sges(&self) -> &[Sge] {
        &self.sges[..self.n as usize]
    }
}

/// The send queue of an RC QP: a ring of WQEs plus an inline area per slot. It starts
/// at [`FIRST_SLOTS`] and doubles (up to the QP's depth) when a post finds it full, so
/// posting allocates only while the queue reaches a new high-water mark. Allocating
/// the whole depth at creation cost a server ~100 KiB per connection (257 WQEs of
/// ~330 bytes, and their inline areas) that most connections never use.
pub(crate) struct SendQueue {
    slots: Box<[SendWqe]>,
    inline: Box<[u8]>,
    max_inline: usize,
    cap: usize,
    head: usize,
    len: usize,
    /// Index (from `head`) of the first WQE not fully transmitted.
    pub(crate) tx: usize,
}

/// Slots a send queue starts with.
const FIRST_SLOTS: usize = 8;

fn blank() -> SendWqe {
    SendWqe {
        wr_id: 0,
        op: SendOp::Send,
        flags: SendFlags::empty(),
        signaled: false,
        sges: [Sge::default(); MAX_SGE],
        n: 0,
        len: 0,
        inline: false,
        state: TxState::Pending,
        seq: 0,
        done_bytes: 0,
    }
}

impl SendQueue {
    pub(crate) fn new(depth: u32, max_inline: u32) -> SendQueue {
        // One slot at least, so that indexing never divides by zero.
        let n = (depth as usize).clamp(1, FIRST_SLOTS);
        SendQueue {
            slots: vec![blank(); n].into_boxed_slice(),
            inline: vec![0u8; n * max_inline as usize].into_boxed_slice(),
            max_inline: max_inline as usize,
            cap: depth as usize,
            head: 0,
            len: 0,
            tx: 0,
        }
    }

    /// Doubles the ring (at most to the depth), laying its WQEs out from slot 0.
    fn grow(&mut self) {
        let n = (self.slots.len() * 2).min(self.cap);
        let mut slots = vec![blank(); n].into_boxed_slice();
        let mut inline = vec![0u8; n * self.max_inline].into_boxed_slice();
        let m = self.max_inline;
        for i in 0..self.len {
            let s = self.slot(i);
            slots[i] = self.slots[s];
            inline[i * m..(i + 1) * m].copy_from_slice(&self.inline[s * m..(s + 1) * m]);
        }
        self.slots = slots;
        self.inline = inline;
        self.head = 0;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len >= self.cap
    }

    fn slot(&self, i: usize) -> usize {
        wrap(self.head + i, self.slots.len())
    }

    pub(crate) fn get(&self, i: usize) -> &SendWqe {
        &self.slots[self.slot(i)]
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> &mut SendWqe {
        let s = self.slot(i);
        &mut self.slots[s]
    }

    /// The inline payload of WQE `i`.
    pub(crate) fn inline_data(&self, i: usize) -> &[u8] {
        let s = self.slot(i);
        let w = &self.slots[s];
        &self.inline[s * self.max_inline..s * self.max_inline + w.len as usize]
    }

    /// Appends a WQE; inline payloads are copied now, as `IBV_SEND_INLINE` promises.
    ///
    /// # Safety
    /// For an inline WR every SGE must be readable for its length.
    pub(crate) unsafe fn push(
        &mut self,
        wr_id: u64,
        op: SendOp,
        flags: SendFlags,
        signaled: bool,
        sg: &[Sge],
    ) -> Result<(), PostError> {
        if self.is_full() {
            return Err(PostError::QueueFull);
        }
        if self.len == self.slots.len() {
            self.grow();
        }
        let s = self.slot(self.len);
        let len: u64 = sg.iter().map(|x| u64::from(x.length)).sum();
        let inline = flags.contains(SendFlags::INLINE);
        if inline {
            if len > self.max_inline as u64 {
                return Err(PostError::InlineTooLarge);
            }
            let mut at = s * self.max_inline;
            for x in sg {
                let n = x.length as usize;
                if n == 0 {
                    continue;
                }
                // SAFETY: the caller promises the SGE is readable; the destination is
                // this slot's inline area, in bounds since `len <= max_inline`.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        x.addr as *const u8,
                        self.inline[at..at + n].as_mut_ptr(),
                        n,
                    )
                };
                at += n;
            }
        }
        // Field by field, and only the SGEs in use (`sges()` reads no further): a
        // whole WQE is ~330 bytes, most of them the SGE array.
        let w = &mut self.slots[s];
        w.wr_id = wr_id;
        w.op = op;
        w.flags = flags;
        w.signaled = signaled;
        w.n = if inline { 0 } else { sg.len() as u8 };
        if !inline {
            w.sges[..sg.len()].copy_from_slice(sg);
        }
        w.len = len;
        w.inline = inline;
        w.state = TxState::Pending;
        w.seq = 0;
        w.done_bytes = 0;
        self.len += 1;
        Ok(())
    }

    /// Removes the head WQE.
    pub(crate) fn pop(&mut self) -> Option<SendWqe> {
        if self.len == 0 {
            return None;
        }
        let w = self.slots[self.head];
        self.drop_head();
        Some(w)
    }

    /// Removes the head WQE without copying it out (the caller has read it).
    pub(crate) fn drop_head(&mut self) {
        if self.len == 0 {
            return;
        }
        self.head = wrap(self.head + 1, self.slots.len());
        self.len -= 1;
        self.tx = self.tx.saturating_sub(1);
    }

    /// Drops every WQE without completing it (modify to RESET).
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.tx = 0;
    }
}

/// Builds the `Error::Post` of WR `index`.
pub(crate) fn refuse(index: usize, reason: PostError) -> Error {
    Error::Post { index, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(addr: u64) -> Sge {
        Sge {
            addr,
            length: 8,
            lkey: 7,
        }
    }

    /// A slot is reused without being cleared first: a WQE with fewer SGEs than the
    /// slot's last one shows only its own, and starts afresh (state, progress).
    #[test]
    fn a_reused_slot_shows_only_the_new_wqe() {
        let mut q = SendQueue::new(1, 0);
        let three = [sge(1), sge(2), sge(3)];
        // SAFETY: not inline: no SGE is read.
        unsafe { q.push(1, SendOp::Send, SendFlags::empty(), true, &three) }.unwrap();
        q.get_mut(0).state = TxState::Sent;
        q.get_mut(0).done_bytes = 5;
        q.drop_head();
        assert_eq!(q.len(), 0);
        // SAFETY: as above.
        unsafe { q.push(2, SendOp::Send, SendFlags::empty(), false, &[sge(9)]) }.unwrap();
        let w = q.get(0);
        assert_eq!((w.wr_id, w.signaled, w.len), (2, false, 8));
        assert_eq!(w.sges(), &[sge(9)]);
        assert_eq!((w.state, w.done_bytes, w.seq), (TxState::Pending, 0, 0));
    }
}
