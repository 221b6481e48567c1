//! Work requests: what is posted to send and receive queues.

use crate::ah::AddressHandle;

/// One scatter/gather element, as in `struct ibv_sge`: a range of registered memory
/// named by its address and the local key of the region that covers it.
///
/// `#[repr(C)]` with the field order of `struct ibv_sge`, so that the verbs provider
/// can hand a gather list to the NIC without copying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Sge {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Number of bytes.
    pub length: u32,
    /// Local key of the memory region containing `[addr, addr + length)`.
    pub lkey: u32,
}

bitflags::bitflags! {
    /// Per-WR send flags, as in `enum ibv_send_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA Reads and atomics before this WR.
        const FENCE = 1;
        /// Generate a completion even if the QP was created with `sq_sig_all = false`.
        const SIGNALED = 1 << 1;
        /// Set the solicited-event bit (wakes `req_notify(solicited_only = true)`).
        const SOLICITED = 1 << 2;
        /// Copy the payload at post time; the SGEs' lkeys are not checked and the
        /// memory may be reused as soon as the post returns.
        const INLINE = 1 << 3;
    }
}

/// The operation of a send-queue WR, with its operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// Consumes one receive at the peer.
    Send,
    /// Send carrying 32 bits of immediate data into the peer's completion.
    SendWithImm {
        /// Immediate data (host order here; network order on the wire).
        imm: u32,
    },
    /// Writes the local SGEs into the peer's memory; no receive consumed.
    RdmaWrite {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key of the target region.
        rkey: u32,
    },
    /// RDMA Write that also consumes a receive and delivers `imm` to the peer.
    RdmaWriteWithImm {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key of the target region.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// Reads the peer's memory into the local SGEs.
    RdmaRead {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key of the source region.
        rkey: u32,
    },
    /// 64-bit fetch-and-add at an 8-byte aligned remote address; the old value lands
    /// in the local SGE (8 bytes).
    FetchAdd {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value to add.
        add: u64,
    },
    /// 64-bit compare-and-swap; the old value lands in the local SGE (8 bytes).
    CompareSwap {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value expected at the address.
        compare: u64,
        /// Value stored if the comparison holds.
        swap: u64,
    },
    /// Binds a type-2 memory window to a range of a region (`IBV_WR_BIND_MW`); made
    /// by [`crate::QueuePair::post_bind_mw`], which is how it is posted.
    BindMw(MwBindOp),
    /// Invalidates a memory window's remote key (`IBV_WR_LOCAL_INV`): Reads, Writes
    /// and atomics through it fail from then on, until the window is bound again.
    LocalInv {
        /// The window's current rkey.
        rkey: u32,
    },
}

/// The operands of a bind WR: which window, which region, the range, the rights and
/// the window's new rkey. Built only by [`crate::QueuePair::post_bind_mw`], which
/// keeps the window and region it names alive for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBindOp {
    /// The window (soft: its key's index; verbs: its `ibv_mw` address).
    pub(crate) mw: usize,
    /// The region (soft: its lkey; verbs: its `ibv_mr` address).
    pub(crate) mr: usize,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: crate::access::AccessFlags,
    pub(crate) rkey: u32,
}

impl MwBindOp {
    /// The rkey the window has once the bind executes.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
}

/// Where a UD send goes (`wr.ud` in `struct ibv_send_wr`).
#[derive(Debug, Clone, Copy)]
pub struct UdDest<'a> {
    /// Address handle of the destination port.
    pub ah: &'a AddressHandle,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// A send-queue work request.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Returned unchanged in the completion.
    pub wr_id: u64,
    /// Gather list (for RDMA Read and atomics: the local target).
    pub sg_list: &'a [Sge],
    /// Operation and its operands.
    pub opcode: SendOp,
    /// Signaling, inline, fence, solicited.
    pub flags: SendFlags,
    /// Destination, required on UD QPs and refused on RC.
    pub ud: Option<UdDest<'a>>,
}

impl<'a> SendWr<'a> {
    /// A signaled WR with the given operation.
    pub fn new(wr_id: u64, opcode: SendOp, sg_list: &'a [Sge]) -> Self {
        SendWr {
            wr_id,
            sg_list,
            opcode,
            flags: SendFlags::SIGNALED,
            ud: None,
        }
    }

    /// Replaces the flags.
    pub fn flags(mut self, flags: SendFlags) -> Self {
        self.flags = flags;
        self
    }

    /// Sets the UD destination.
    pub fn ud(mut self, dest: UdDest<'a>) -> Self {
        self.ud = Some(dest);
        self
    }

    /// Total bytes named by the gather list.
    pub fn total_len(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// A receive-queue (or SRQ) work request.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Returned unchanged in the completion.
    pub wr_id: u64,
    /// Scatter list.
    pub sg_list: &'a [Sge],
}
