//! `UdSendRing`: registered send slots of one UD QP, kept by their owner while posted.
//!
//! Unlike [`super::SendRing`], posting does not consume a slot: a datagram may be lost,
//! and its sender reposts the very same bytes (no copy) until an answer comes. A slot
//! counts its posts in flight; its bytes are writable only while none is, and it
//! returns to the free list once its owner released it *and* every post completed.
//! Every UD send is signaled, since each post's completion is what ends that count.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::access::AccessFlags;
use crate::ah::AddressHandle;
use crate::error::{Error, Result};
use crate::mr::MemoryRegion;
use crate::pd::ProtectionDomain;
use crate::qp::QueuePair;
use crate::qp_state::QpType;
use crate::wc::{WcStatus, WorkCompletion};
use crate::wr::{SendFlags, SendOp, SendWr, Sge, UdDest};

use super::imm_mode::{ImmMode, IMM_HEADER_LEN};

static NEXT_RING_ID: AtomicU32 = AtomicU32::new(1);

/// Where a datagram goes: a cached address handle, the peer's QPN and Q_Key.
#[derive(Debug, Clone)]
pub struct UdDestination {
    /// Address handle of the peer's port (created once per peer and shared).
    pub ah: Arc<AddressHandle>,
    /// The peer's UD QP number.
    pub qpn: u32,
    /// The peer's Q_Key.
    pub qkey: u32,
}

/// A slot taken from a [`UdSendRing`]. Not `Clone`: holding it is the right to write
/// (while not posted), repost, and release the slot.
#[derive(Debug)]
#[must_use = "release the slot"]
pub struct UdSlot {
    ring: u32,
    idx: u32,
}

#[derive(Default)]
struct SlotState {
    /// Posts of this slot whose completion has not been reaped.
    posted: u32,
    /// Its owner released it: free once `posted` is 0.
    released: bool,
    /// Keeps the destination's address handle alive while a post may use it.
    ah: Option<Arc<AddressHandle>>,
}

/// `n` send slots of `slot_size` bytes in one registered region, posted on a UD QP.
///
/// In [`ImmMode::Header`] the immediate is written at the head of the slot and
/// [`UdSendRing::buf`] starts 4 bytes into it, as with [`super::SendRing`].
pub struct UdSendRing {
    // Field order: the QP (which may still read the slots) goes before the memory.
    qp: Arc<QueuePair>,
    mr: MemoryRegion,
    id: u32,
    /// Registered bytes per slot (header included).
    slot_size: usize,
    /// Bytes at the head of each slot taken by the immediate header (0 or 4).
    hdr: usize,
    free: Vec<u32>,
    slots: Vec<SlotState>,
    in_flight: u32,
    max_inline: usize,
}

impl UdSendRing {
    /// Registers `n` slots of `slot_size` bytes in `pd` for Sends with Immediate on
    /// the UD QP `qp`.
    pub fn new(
        pd: &ProtectionDomain,
        qp: Arc<QueuePair>,
        n: u32,
        slot_size: usize,
    ) -> Result<UdSendRing> {
        UdSendRing::with_mode(pd, qp, n, slot_size, ImmMode::Immediate)
    }

    /// Registers `n` slots of `slot_size` bytes in `pd` for sends on the UD QP `qp`
    /// whose immediates travel as `mode` says.
    pub fn with_mode(
        pd: &ProtectionDomain,
        qp: Arc<QueuePair>,
        n: u32,
        slot_size: usize,
        mode: ImmMode,
    ) -> Result<UdSendRing> {
        let hdr = mode.header_len();
        if qp.qp_type() != QpType::Ud || n == 0 || slot_size == 0 || slot_size < hdr {
            return Err(Error::InvalidArgument(format!(
                "UD send ring of {n} slots of {slot_size} bytes on a {:?} QP",
                qp.qp_type()
            )));
        }
        let mr = pd.alloc_mr(n as usize * slot_size, AccessFlags::empty())?;
        let max_inline = qp.cap().max_inline_data as usize;
        Ok(UdSendRing {
            qp,
            mr,
            id: NEXT_RING_ID.fetch_add(1, Ordering::Relaxed),
            slot_size,
            hdr,
            free: (0..n).rev().collect(),
            slots: (0..n).map(|_| SlotState::default()).collect(),
            in_flight: 0,
            max_inline,
        })
    }

    /// Payload bytes per slot: what [`UdSendRing::buf`] holds (in
    /// [`ImmMode::Header`], 4 fewer than each slot registers).
    pub fn slot_size(&self) -> usize {
        self.slot_size - self.hdr
    }

    /// Slots free for [`UdSendRing::acquire`].
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Posts whose completion has not been reaped.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Takes a free slot, if any.
    pub fn acquire(&mut self) -> Option<UdSlot> {
        let idx = self.free.pop()?;
        self.slots[idx as usize] = SlotState::default();
        Some(UdSlot { ring: self.id, idx })
    }

    /// The slot's bytes, to encode into.
    ///
    /// # Panics
    /// If `slot` belongs to another ring or a post of it is still in flight.
    pub fn buf(&mut self, slot: &UdSlot) -> &mut [u8] {
        assert_eq!(slot.ring, self.id, "slot of another ring");
        assert_eq!(
            self.slots[slot.idx as usize].posted, 0,
            "writing a UD slot the device may still read"
        );
        // SAFETY: no post of this slot is in flight (checked above), so no WR names
        // this range; `&mut self` and the non-Clone `UdSlot` make this the only
        // reference to it.
        unsafe {
            self.mr.slice_mut(
                slot.idx as usize * self.slot_size + self.hdr,
                self.slot_size - self.hdr,
            )
        }
    }

    /// Posts the first `len` bytes of `slot`'s payload to `dest` with immediate `imm`
    /// (inline when small): a Send with Immediate, or in [`ImmMode::Header`] a Send
    /// of header and payload, `len + 4` bytes. The slot stays with its owner and may
    /// be posted again; a repost while an earlier post is in flight must carry the
    /// same immediate in header mode (the device may still be reading the header).
    pub fn post(
        &mut self,
        slot: &UdSlot,
        len: usize,
        imm: u32,
        dest: &UdDestination,
    ) -> Result<()> {
        assert_eq!(slot.ring, self.id, "slot of another ring");
        assert!(
            len <= self.slot_size - self.hdr,
            "{len} bytes do not fit the slot"
        );
        let op = if self.hdr == 0 {
            SendOp::SendWithImm { imm }
        } else {
            self.write_header(slot, imm)?;
            SendOp::Send
        };
        let len = len + self.hdr;
        let mut flags = SendFlags::SIGNALED;
        if len <= self.max_inline {
            flags |= SendFlags::INLINE;
        }
        let sge = [self.mr.sge(slot.idx as usize * self.slot_size, len as u32)];
        let sg_list: &[Sge] = if len == 0 { &[] } else { &sge };
        let ud = UdDest {
            ah: &dest.ah,
            remote_qpn: dest.qpn,
            remote_qkey: dest.qkey,
        };
        let wr = SendWr::new(u64::from(slot.idx), op, sg_list)
            .flags(flags)
            .ud(ud);
        // SAFETY: the SGE names `len` bytes of this ring's own live region; `posted`
        // counts this WR until its (always signaled) completion is reaped, and while it
        // is nonzero `buf` refuses the slot and `release` keeps it off the free list;
        // the address handle is kept in the slot's state for as long; the QP, which
        // the ring owns, drops before the region.
        unsafe { self.qp.post_send(&[wr]) }?;
        let st = &mut self.slots[slot.idx as usize];
        st.posted += 1;
        st.ah = Some(dest.ah.clone());
        self.in_flight += 1;
        Ok(())
    }

    /// Header mode: puts `imm` at the head of the slot, or with a post of it still in
    /// flight checks that the header there already says `imm`.
    fn write_header(&mut self, slot: &UdSlot, imm: u32) -> Result<()> {
        let at = slot.idx as usize * self.slot_size;
        let want = imm.to_be_bytes();
        if self.slots[slot.idx as usize].posted == 0 {
            // SAFETY: no post of this slot is in flight, so nothing reads these bytes;
            // `&mut self` and the held `UdSlot` make this the only reference.
            unsafe { self.mr.slice_mut(at, IMM_HEADER_LEN) }.copy_from_slice(&want);
            return Ok(());
        }
        // SAFETY: the device may be reading these bytes; reading them too is sound, and
        // nothing writes them while a post is in flight (this very check).
        let have = unsafe { self.mr.slice(at, IMM_HEADER_LEN) };
        if have != want {
            return Err(Error::InvalidArgument(format!(
                "UD slot reposted with immediate {imm:#x} while a post with {:#x} is in flight",
                u32::from_be_bytes([have[0], have[1], have[2], have[3]])
            )));
        }
        Ok(())
    }

    /// Gives the slot back: free at once if nothing of it is in flight, else when
    /// its last completion is reaped.
    pub fn release(&mut self, slot: UdSlot) {
        assert_eq!(slot.ring, self.id, "slot of another ring");
        let st = &mut self.slots[slot.idx as usize];
        if st.posted == 0 {
            st.ah = None;
            self.free.push(slot.idx);
        } else {
            st.released = true;
        }
    }

    /// Ends one post of the slot a send completion names. Returns its status.
    pub fn handle_completion(&mut self, wc: &WorkCompletion) -> WcStatus {
        if let Some(st) = self.slots.get_mut(wc.wr_id as usize) {
            if st.posted > 0 {
                st.posted -= 1;
                self.in_flight -= 1;
                if st.posted == 0 {
                    st.ah = None;
                    if st.released {
                        st.released = false;
                        self.free.push(wc.wr_id as u32);
                    }
                }
            }
        }
        wc.status
    }
}

impl std::fmt::Debug for UdSendRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdSendRing")
            .field("slot_size", &self.slot_size)
            .field("free", &self.free.len())
            .field("in_flight", &self.in_flight)
            .finish()
    }
}
