//! Shared receive queues: one pool of receives taken by many QPs, with the
//! low-watermark event of `ibv_modify_srq(IBV_SRQ_LIMIT)`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::error::{Error, PostError, Result};
use crate::event::{AsyncEvent, ObjectId};
use crate::srq::SrqInitAttr;
use crate::wr::RecvWr;

use super::device::{next_object_id, Device, MAX_SGE, MAX_WR};
use super::idle_receives::{self, coalesce, inner_pages, RECV_ACCESS};
use super::pd::Pd;
use super::qp::wqe::RecvWqe;

struct Inner {
    q: VecDeque<RecvWqe>,
    limit: u32,
}

/// A soft shared receive queue.
pub(crate) struct Srq {
    dev: Arc<Device>,
    pub(crate) pd: u32,
    id: u64,
    max_wr: u32,
    max_sge: u32,
    inner: Mutex<Inner>,
}

impl Pd {
    pub(crate) fn create_srq(self: &Arc<Self>, attr: &SrqInitAttr) -> Result<Arc<Srq>> {
        if attr.max_wr == 0 || attr.max_wr > MAX_WR || attr.max_sge as usize > MAX_SGE {
            return Err(Error::InvalidArgument(format!(
                "SRQ of {} WRs x {} SGEs exceeds the device",
                attr.max_wr, attr.max_sge
            )));
        }
        if attr.srq_limit > attr.max_wr {
            return Err(Error::InvalidArgument("srq_limit above max_wr".into()));
        }
        let srq = Arc::new(Srq {
            dev: self.dev.clone(),
            pd: self.id,
            id: next_object_id(),
            max_wr: attr.max_wr,
            max_sge: attr.max_sge.max(1),
            inner: Mutex::new(Inner {
                q: VecDeque::with_capacity(attr.max_wr as usize),
                limit: attr.srq_limit,
            }),
        });
        idle_receives::register(Arc::downgrade(&srq));
        Ok(srq)
    }
}

impl Srq {
    /// # Safety
    /// See [`crate::SharedReceiveQueue::post_recv`].
    pub(crate) unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (index, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > self.max_sge as usize {
                return Err(Error::Post {
                    index,
                    reason: PostError::TooManySges,
                });
            }
            if g.q.len() >= self.max_wr as usize {
                return Err(Error::Post {
                    index,
                    reason: PostError::QueueFull,
                });
            }
            g.q.push_back(RecvWqe::new(wr));
        }
        Ok(())
    }

    pub(crate) fn arm_limit(&self, limit: u32) -> Result<()> {
        if limit > self.max_wr {
            return Err(Error::InvalidArgument(format!(
                "limit {limit} above max_wr {}",
                self.max_wr
            )));
        }
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).limit = limit;
        Ok(())
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Takes the newest receive; raises the limit event when the count falls below it.
    ///
    /// Verbs leaves the order an SRQ's receives are used in to the provider (each
    /// completion names its own `wr_id`). Newest first keeps a mostly idle pool's
    /// other buffers untouched, so a soft server's resident memory follows the
    /// receives it really uses rather than every slot it ever posted, and the
    /// buffer used next is the one still in cache.
    ///
    /// The receive is copied straight into `dst` (one copy of the WQE, not a move per
    /// layer); `false` if there is none.
    pub(crate) fn take_into(&self, dst: &mut RecvWqe) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(w) = g.q.back() else {
            return false;
        };
        dst.copy_from(w);
        g.q.pop_back();
        if g.limit > 0 && (g.q.len() as u32) < g.limit {
            g.limit = 0;
            self.dev
                .raise(AsyncEvent::SrqLimitReached(ObjectId(self.id)));
        }
        true
    }

    /// Drops the pages of all posted receives but the newest `keep` (see
    /// `idle_receives`); returns the bytes handed back.
    pub(crate) fn release_idle(&self, keep: usize) -> usize {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let idle = g.q.len().saturating_sub(keep);
        // Held until the pages are dropped: a region deregistered meanwhile stays
        // mapped (and is not someone else's memory yet).
        let mut held = Vec::new();
        let mut ranges = Vec::new();
        // `take` pops from the back: the front holds the receives posted longest ago.
        for wqe in g.q.iter().take(idle) {
            for sge in wqe.sges() {
                let Ok(r) = self.dev.keys.resolve(
                    sge.lkey,
                    self.pd,
                    sge.addr,
                    u64::from(sge.length),
                    RECV_ACCESS,
                ) else {
                    continue;
                };
                if let Some(range) = inner_pages(r.ptr as usize, sge.length as usize) {
                    ranges.push(range);
                }
                held.push(r.buf);
            }
        }
        coalesce(&mut ranges);
        let mut released = 0;
        for (at, len) in ranges {
            // SAFETY: `[at, at + len)` is whole pages inside posted receives' checked
            // ranges of provider-owned private anonymous mappings (`MrBuffer`), kept
            // mapped by `held`. Under this SRQ's lock none of those receives can be
            // taken, so nothing writes them now; their contents are undefined until a
            // completion, and the next write faults in a zeroed page.
            let rc = unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_DONTNEED) };
            if rc == 0 {
                released += len;
            }
        }
        drop(held);
        released
    }
}
