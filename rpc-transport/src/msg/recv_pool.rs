//! `RecvPool`: registered receive slots posted to an SRQ or a QP's receive queue.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::access::AccessFlags;
use crate::error::{Error, Result};
use crate::mr::MemoryRegion;
use crate::pd::ProtectionDomain;
use crate::qp::QueuePair;
use crate::srq::SharedReceiveQueue;
use crate::wc::{WcStatus, WorkCompletion};
use crate::wr::{RecvWr, Sge};
use crate::{QpType, GRH_LEN};

use super::imm_mode::{ImmMode, IMM_HEADER_LEN};

/// Where a pool posts its receives.
#[derive(Clone)]
pub enum RecvTarget {
    /// A shared receive queue (a server's, for every connection).
    Srq(Arc<SharedReceiveQueue>),
    /// One QP's own receive queue.
    Qp(Arc<QueuePair>),
}

/// Called with the number of receives just reposted (a client returns that many
/// credits to its engine).
pub type OnRepost = Box<dyn Fn(u32) + Send + Sync>;

/// Receives reposted per post list.
const POST_CHUNK: usize = 32;

/// Bits of a slot index that number the slot inside its region; the bits above
/// name the region.
const SEG_SHIFT: u32 = 20;
const SEG_MASK: u32 = (1 << SEG_SHIFT) - 1;
/// Regions a pool may have: its first and those [`RecvPool::grow`] adds.
const MAX_SEGS: usize = 24;

struct Inner {
    // Field order: the queue the receives sit on goes before the memory they name.
    target: RecvTarget,
    /// Region `k` holds the slots whose index has `k` in its top bits; set once each
    /// (by `new` and `grow`), read without a lock.
    segs: Vec<OnceLock<MemoryRegion>>,
    /// Slots in all regions.
    slots: AtomicUsize,
    /// Registered bytes per slot.
    slot_size: usize,
    /// Header mode: bytes presented slots skip (0 with immediates, else 4).
    skip: usize,
    /// Header mode: where the header sits in a received buffer (after the GRH area
    /// on a UD QP).
    hdr_at: usize,
    pending: Mutex<Vec<u32>>,
    /// The thread whose [`RecvBatch`] is open ([`thread_token`]), or 0.
    batching: AtomicUsize,
    /// A slot dropped after [`RecvSlot::repost_later`] may wait in `pending` for
    /// [`RecvPool::flush_deferred`].
    deferred: AtomicBool,
    reposted: AtomicU64,
    on_repost: Option<OnRepost>,
}

/// `n` receive slots of `slot_size` bytes in registered regions; [`RecvPool::grow`]
/// adds more (a client's receives follow its credit window).
///
/// In [`ImmMode::Header`] each received frame starts with the sender's 4-byte
/// immediate header (after the 40-byte GRH area on a UD QP); a [`RecvSlot`] reads it
/// into [`RecvSlot::imm`] and presents the bytes after it, so a slot holds 4 bytes
/// fewer ([`RecvPool::slot_size`]). A pool on an SRQ takes its frames as RC frames.
#[derive(Clone)]
pub struct RecvPool {
    inner: Arc<Inner>,
}

/// A completed receive: the received bytes, until dropped, when the buffer is posted
/// again (at once, or, dropped on the thread of an open [`RecvPool::batch`], at its
/// end).
pub struct RecvSlot {
    pool: Arc<Inner>,
    idx: u32,
    /// Presented bytes start this far into the slot (past a header in header mode).
    off: u32,
    len: usize,
    imm: Option<u32>,
    retired: bool,
    /// Dropped, it may wait for [`RecvPool::flush_deferred`] ([`RecvSlot::repost_later`]).
    later: bool,
}

/// While alive, [`RecvSlot`]s dropped on the thread that opened it wait and are
/// reposted together in post lists when it drops (doorbell batching for a burst of
/// completions). Slots dropped on other threads are reposted at once: their owners
/// (a handler, a caller reading its reply) may answer or send next, and a server
/// returns a frame's credit only once its receive is back (`rpc_core::engine::wire`,
/// "Why RNR stays impossible"), so their reposts must not wait for a batch that
/// knows nothing of them.
pub struct RecvBatch<'a> {
    pool: &'a RecvPool,
}

impl RecvPool {
    /// Registers `n` slots for frames with immediates and posts them all to `target`.
    pub fn new(
        pd: &ProtectionDomain,
        target: RecvTarget,
        n: u32,
        slot_size: usize,
        on_repost: Option<OnRepost>,
    ) -> Result<RecvPool> {
        RecvPool::with_mode(pd, target, n, slot_size, on_repost, ImmMode::Immediate)
    }

    /// Registers `n` slots for frames whose immediates travel as `mode` says, and
    /// posts them all to `target`.
    pub fn with_mode(
        pd: &ProtectionDomain,
        target: RecvTarget,
        n: u32,
        slot_size: usize,
        on_repost: Option<OnRepost>,
        mode: ImmMode,
    ) -> Result<RecvPool> {
        let skip = mode.header_len();
        let hdr_at = match &target {
            RecvTarget::Qp(q) if q.qp_type() == QpType::Ud => GRH_LEN,
            _ => 0,
        };
        // A header mode slot must hold at least the header where it lands.
        let min = if skip == 0 { 1 } else { hdr_at + skip };
        if n == 0 || slot_size < min || slot_size > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "receive pool of {n} slots of {slot_size} bytes \
                 ({hdr_at}-byte GRH area, {skip}-byte immediate header)"
            )));
        }
        if n > SEG_MASK {
            return Err(Error::InvalidArgument(format!(
                "receive pool of {n} slots in one region"
            )));
        }
        let mr = pd.alloc_mr(n as usize * slot_size, AccessFlags::LOCAL_WRITE)?;
        let segs: Vec<OnceLock<MemoryRegion>> = (0..MAX_SEGS).map(|_| OnceLock::new()).collect();
        let _ = segs[0].set(mr);
        let pool = RecvPool {
            inner: Arc::new(Inner {
                target,
                segs,
                slots: AtomicUsize::new(n as usize),
                slot_size,
                skip,
                hdr_at,
                pending: Mutex::new((0..n).collect()),
                batching: AtomicUsize::new(0),
                deferred: AtomicBool::new(false),
                reposted: AtomicU64::new(0),
                on_repost: None,
            }),
        };
        pool.inner.flush_checked()?;
        // The initial posts are not returns: install the hook only now.
        let mut inner = Arc::try_unwrap(pool.inner).ok().expect("not shared yet");
        inner.on_repost = on_repost;
        inner.reposted = AtomicU64::new(0);
        Ok(RecvPool {
            inner: Arc::new(inner),
        })
    }

    /// Bytes a slot presents at most: the registered size, less the 4-byte header
    /// in [`ImmMode::Header`].
    pub fn slot_size(&self) -> usize {
        self.inner.slot_size - self.inner.skip
    }

    /// Slots in all regions (all posted, or received and not yet reposted).
    pub fn capacity(&self) -> usize {
        self.inner.slots.load(Ordering::Acquire)
    }

    /// Registers `extra` more slots in a new region and posts them. The repost hook
    /// is not called for them: they are new receives, not returned ones.
    pub fn grow(&self, pd: &ProtectionDomain, extra: u32) -> Result<()> {
        if extra == 0 || extra > SEG_MASK {
            return Err(Error::InvalidArgument(format!(
                "growing a receive pool by {extra} slots"
            )));
        }
        let mr = pd.alloc_mr(
            extra as usize * self.inner.slot_size,
            AccessFlags::LOCAL_WRITE,
        )?;
        // Under the pending lock: one grow at a time, and a flush sees the new
        // slots only once their region is set.
        let mut pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(k) = self.inner.segs.iter().position(|s| s.get().is_none()) else {
            return Err(Error::InvalidArgument(format!(
                "receive pool already has {MAX_SEGS} regions"
            )));
        };
        let _ = self.inner.segs[k].set(mr);
        let seg = (k as u32) << SEG_SHIFT;
        let fresh: Vec<u32> = (0..extra).map(|i| seg | i).collect();
        let mut refused = Vec::new();
        for chunk in fresh.chunks(POST_CHUNK) {
            let posted = self.inner.post(chunk);
            refused.extend_from_slice(&chunk[posted.unwrap_or_else(|(n, _)| n)..]);
        }
        self.inner.slots.fetch_add(extra as usize, Ordering::AcqRel);
        // Refused receives wait with the others for a later flush.
        pending.extend(refused);
        Ok(())
    }

    /// Receives reposted since creation.
    pub fn reposted(&self) -> u64 {
        self.inner.reposted.load(Ordering::Relaxed)
    }

    /// Turns a receive completion of this pool into its slot. An error completion
    /// (a flushed receive of a dead QP) yields its status; its buffer is reposted
    /// only to an SRQ, which outlives the QP.
    pub fn complete(&self, wc: &WorkCompletion) -> std::result::Result<RecvSlot, WcStatus> {
        let mut slot = RecvSlot {
            pool: self.inner.clone(),
            idx: wc.wr_id as u32,
            off: 0,
            len: (wc.byte_len as usize).min(self.inner.slot_size),
            imm: wc.imm_data,
            retired: false,
            later: false,
        };
        if wc.is_ok() {
            if self.inner.skip != 0 {
                slot.read_header();
            }
            return Ok(slot);
        }
        // A QP's own receive is not reposted: its QP is in error and would flush it
        // straight back. An SRQ outlives the QP, so its buffer goes back.
        slot.retired = matches!(self.inner.target, RecvTarget::Qp(_));
        Err(wc.status)
    }

    /// Posts a receive whose repost [`RecvSlot::repost_later`] left waiting, if any
    /// (`true`: there may have been one). Cheap when there is none (one atomic swap).
    pub fn flush_deferred(&self) -> bool {
        let deferred = self.inner.deferred.swap(false, Ordering::AcqRel);
        if deferred {
            self.inner.flush();
        }
        deferred
    }

    /// Starts a batch: reposts of slots dropped on this thread wait until the
    /// returned guard drops. One batch at a time per pool (its poller's).
    pub fn batch(&self) -> RecvBatch<'_> {
        self.inner.batching.store(thread_token(), Ordering::SeqCst);
        RecvBatch { pool: self }
    }
}

impl Drop for RecvBatch<'_> {
    fn drop(&mut self) {
        self.pool.inner.batching.store(0, Ordering::SeqCst);
        self.pool.inner.flush();
    }
}

thread_local! {
    static THREAD_MARK: u8 = const { 0 };
}

/// A nonzero number unique to the calling thread while it lives (the address of a
/// thread-local), cheaper than `thread::current().id()`.
fn thread_token() -> usize {
    THREAD_MARK.with(|m| m as *const u8 as usize)
}

impl Inner {
    fn flush(&self) {
        if let Err(e) = self.flush_checked() {
            // The queue is gone or in error: the connection is being torn down, and
            // its buffers are not needed any more.
            tracing::debug!(error = %e, "receive repost refused");
        }
    }

    fn flush_checked(&self) -> Result<()> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        while !pending.is_empty() {
            let k = pending.len().min(POST_CHUNK);
            let new_len = pending.len() - k;
            let r = self.post(&pending[new_len..]);
            let posted = match &r {
                Ok(n) => *n,
                Err((n, _)) => *n,
            };
            if posted < k {
                // Keep the refused ones so a later flush can try again.
                pending.drain(new_len..new_len + posted);
            } else {
                pending.truncate(new_len);
            }
            if posted > 0 {
                self.reposted.fetch_add(posted as u64, Ordering::Relaxed);
                if let Some(hook) = &self.on_repost {
                    hook(posted as u32);
                }
            }
            r.map_err(|(_, e)| e)?;
        }
        Ok(())
    }

    /// The region and byte offset of slot `idx`.
    fn place(&self, idx: u32) -> (&MemoryRegion, usize) {
        let mr = self.segs[(idx >> SEG_SHIFT) as usize]
            .get()
            .expect("a slot's region is set before the slot exists");
        (mr, (idx & SEG_MASK) as usize * self.slot_size)
    }

    /// Posts the receives of `slots` (at most [`POST_CHUNK`]): how many were
    /// posted, or how many before the error.
    fn post(&self, slots: &[u32]) -> std::result::Result<usize, (usize, Error)> {
        let k = slots.len().min(POST_CHUNK);
        // One slot (the common case) zeroes one SGE, not a whole chunk's.
        let mut one_sge = [Sge::default()];
        let mut chunk_sges;
        let sges: &mut [Sge] = if k == 1 {
            &mut one_sge
        } else {
            chunk_sges = [Sge::default(); POST_CHUNK];
            &mut chunk_sges
        };
        for (s, &idx) in sges.iter_mut().zip(&slots[..k]) {
            let (mr, off) = self.place(idx);
            *s = mr.sge(off, self.slot_size as u32);
        }
        let wr = |i: usize| RecvWr {
            wr_id: u64::from(slots[i]),
            sg_list: std::slice::from_ref(&sges[i]),
        };
        // One slot (a reply read on its caller's task) is the common case: build
        // one WR, not a full chunk.
        let one;
        let all: [RecvWr<'_>; POST_CHUNK];
        let wrs: &[RecvWr<'_>] = if k == 1 {
            one = [wr(0)];
            &one
        } else {
            all = std::array::from_fn(|i| wr(i.min(k - 1)));
            &all[..k]
        };
        // Each SGE names a whole slot of this pool's live regions; a slot is posted
        // only when new (`new`, `grow`) or after its `RecvSlot` dropped, so nothing
        // reads or writes it until its completion is reaped and turned into a new
        // `RecvSlot`; the regions outlive the queue (field order).
        let r = match &self.target {
            // SAFETY: as explained above.
            RecvTarget::Srq(s) => unsafe { s.post_recv(wrs) },
            // SAFETY: as explained above.
            RecvTarget::Qp(q) => unsafe { q.post_recv(wrs) },
        };
        match r {
            Ok(()) => Ok(k),
            Err(e) => {
                let n = match &e {
                    Error::Post { index, .. } => (*index).min(k),
                    _ => 0,
                };
                Err((n, e))
            }
        }
    }
}

impl RecvSlot {
    /// Header mode: takes the immediate from the frame's head and presents the bytes
    /// after it. On a UD QP the header follows the GRH area; the presented bytes then
    /// start 4 bytes into that area, so the payload still begins `GRH_LEN` bytes in
    /// (the 40 bytes before it are not a GRH any more; nothing reads them). A frame
    /// too short for a header is one without an immediate, and presents nothing.
    #[cold]
    fn read_header(&mut self) {
        let at = self.pool.hdr_at;
        if self.len < at + IMM_HEADER_LEN {
            self.imm = None;
            self.len = 0;
            return;
        }
        let mut h = [0u8; IMM_HEADER_LEN];
        let (mr, off) = self.pool.place(self.idx);
        // SAFETY: as in `bytes`: the receive completed and the buffer is not reposted
        // while this guard lives.
        h.copy_from_slice(unsafe { mr.slice(off + at, IMM_HEADER_LEN) });
        self.imm = Some(u32::from_be_bytes(h));
        self.off = IMM_HEADER_LEN as u32;
        self.len -= IMM_HEADER_LEN;
    }

    /// The received bytes (after the immediate header in header mode; on a UD QP
    /// starting with the 40-byte GRH area).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the receive for this slot completed and the buffer is reposted only
        // when this guard drops, so the device writes nothing here while it lives.
        unsafe {
            let (mr, off) = self.pool.place(self.idx);
            mr.slice(off + self.off as usize, self.len)
        }
    }

    /// The frame's 32-bit immediate, wherever it travelled (the completion's
    /// immediate, or the header in header mode); `None` for a frame sent without one.
    pub fn imm(&self) -> Option<u32> {
        self.imm
    }

    /// Number of bytes [`RecvSlot::bytes`] presents.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was received (a frame with only an immediate).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// When this slot drops with no other repost waiting, its own waits for the
    /// pool's next post (a batch's end, or [`RecvPool::flush_deferred`]) instead of
    /// being posted on the spot: the slot of a reply read on its caller's task, whose
    /// repost (several hundred instructions) then leaves the reply's path for the
    /// wait on the next. Its owner must call `flush_deferred` where a receive's
    /// return matters (before waiting for room that only reposts bring back); at
    /// most one slot waits so.
    pub fn repost_later(&mut self) {
        self.later = true;
    }
}

impl Drop for RecvSlot {
    fn drop(&mut self) {
        if self.retired {
            return;
        }
        let waiting = {
            let mut pending = self.pool.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.push(self.idx);
            pending.len()
        };
        if self.later && waiting == 1 {
            self.pool.deferred.store(true, Ordering::Release);
            return;
        }
        // Pairs with the store in `RecvBatch::drop`: either the batch's flush sees
        // this slot, or this load sees the batch over (or another thread's) and
        // flushes it here.
        if self.pool.batching.load(Ordering::SeqCst) != thread_token() {
            self.pool.flush();
        }
    }
}

impl std::fmt::Debug for RecvSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecvSlot({} bytes)", self.len)
    }
}

impl std::fmt::Debug for RecvPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvPool")
            .field("slot_size", &self.inner.slot_size)
            .finish()
    }
}
