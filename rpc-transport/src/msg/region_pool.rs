//! `RegionPool`: bounded, reused registered memory for messages that travel by
//! reference (RDMA Read "rendezvous").
//!
//! A registration cache rather than one carved arena: a message needs one
//! contiguous region (one descriptor), and registering is slow (a syscall and page
//! pinning on verbs), so regions are registered on demand, in multiples of
//! [`GRAIN`], kept when they come back, and handed out again to any message that
//! fits one without wasting more than half of it. The pool never registers beyond
//! its byte limit: a request that finds no room evicts free regions of the wrong
//! size, and if that is not enough it waits, in order of arrival ([`Ticket`]), for
//! regions in use to come back. A steady workload of similar sizes thus registers
//! nothing per message. A message larger than the whole limit is refused at once
//! with an error naming the limit.
//!
//! Regions are registered with `LOCAL_WRITE | REMOTE_READ` by default: the local
//! device writes them as RDMA Read targets, and the peer reads them when they are
//! lent; no peer may write them. [`RegionPool::with_access`] registers otherwise:
//! `LOCAL_WRITE` alone for a pool only ever read into, `LOCAL_WRITE | MW_BIND` for
//! one lent through memory windows only (the region's own rkey then reads nothing). A region comes back to the pool when its [`PooledRegion`] drops,
//! including when it was turned into [`Bytes`] ([`PooledRegion::into_bytes`]) and the
//! last clone of those drops.
//!
//! Regions turned into [`Bytes`] are listed in the pool by address while any of
//! those `Bytes` lives, so that a sender handed such `Bytes` (a server echoing or
//! forwarding a body it received) can find the registered region they lie in
//! ([`RegionPool::shared_containing`]) and lend the bytes where they are, keeping
//! the region alive with a [`SharedRegion`] until its peer read them, instead of
//! copying them into a region of its own.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::access::AccessFlags;
use crate::error::{Error, Result};
use crate::mr::MemoryRegion;
use crate::pd::ProtectionDomain;
use crate::wr::Sge;

/// Regions are registered in multiples of this many bytes.
pub const GRAIN: usize = 64 * 1024;

/// What a pool holds, for stats and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// The byte limit on registered memory.
    pub limit: usize,
    /// Bytes registered now (lent and free).
    pub registered: usize,
    /// Bytes of regions handed out and not yet back.
    pub in_use: usize,
    /// Regions handed out and not yet back.
    pub regions_in_use: usize,
    /// Requests waiting for room.
    pub waiting: usize,
    /// Registrations made since creation (a steady workload stops adding to it).
    pub registrations: u64,
    /// Bytes lent to a peer where they lie, since creation: of regions shared as
    /// [`Bytes`] (a body received and sent on without a copy), or, in a client's
    /// lend pool, of requests' `Bytes` lent instead of encoded into a region.
    pub lent_in_place: u64,
}

struct Waiter {
    ticket: u64,
    waker: Option<Waker>,
}

struct State {
    /// Registered regions not in use.
    free: Vec<MemoryRegion>,
    registered: usize,
    in_use: usize,
    regions_in_use: usize,
    registrations: u64,
    /// Requests in order of arrival; only the head may take room.
    queue: VecDeque<Waiter>,
    next_ticket: u64,
    /// Regions shared as `Bytes`, by address, while any of those `Bytes` lives.
    shared: BTreeMap<u64, Weak<Shared>>,
    lent_in_place: u64,
}

struct Inner {
    pd: ProtectionDomain,
    limit: usize,
    access: AccessFlags,
    state: Mutex<State>,
}

/// A bounded pool of registered regions on one protection domain. Cheap to clone
/// (clones share the pool).
#[derive(Clone)]
pub struct RegionPool {
    inner: Arc<Inner>,
}

/// A handle that does not keep a [`RegionPool`] alive (for stats readers).
#[derive(Clone)]
pub struct WeakRegionPool(std::sync::Weak<Inner>);

impl WeakRegionPool {
    /// The pool, if it is still alive.
    pub fn upgrade(&self) -> Option<RegionPool> {
        self.0.upgrade().map(|inner| RegionPool { inner })
    }
}

/// A region taken from a [`RegionPool`], back in the pool when dropped.
pub struct PooledRegion {
    // Field order: nothing; the region goes back to the pool in `drop`.
    mr: Option<MemoryRegion>,
    pool: Arc<Inner>,
}

/// A place in a pool's queue for `len` bytes: a future that resolves to the region
/// once every earlier request was served and room is free. Dropping it gives up the
/// place (the next request may then be served).
pub struct Ticket {
    pool: Arc<Inner>,
    ticket: u64,
    need: usize,
    done: bool,
}

fn rounded(len: usize) -> usize {
    len.max(1).div_ceil(GRAIN) * GRAIN
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RegionPool {
    /// A pool on `pd` that never registers more than `limit` bytes (rounded down to
    /// [`GRAIN`], at least one grain). Nothing is registered until asked for.
    pub fn new(pd: &ProtectionDomain, limit: usize) -> RegionPool {
        Self::with_access(
            pd,
            limit,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
    }

    /// As [`RegionPool::new`], registering regions with `access`.
    pub fn with_access(pd: &ProtectionDomain, limit: usize, access: AccessFlags) -> RegionPool {
        let limit = (limit / GRAIN).max(1) * GRAIN;
        RegionPool {
            inner: Arc::new(Inner {
                pd: pd.clone(),
                limit,
                access,
                state: Mutex::new(State {
                    free: Vec::new(),
                    registered: 0,
                    in_use: 0,
                    regions_in_use: 0,
                    registrations: 0,
                    queue: VecDeque::new(),
                    next_ticket: 0,
                    shared: BTreeMap::new(),
                    lent_in_place: 0,
                }),
            }),
        }
    }

    /// A handle that does not keep the pool alive.
    pub fn downgrade(&self) -> WeakRegionPool {
        WeakRegionPool(Arc::downgrade(&self.inner))
    }

    /// What its regions are registered with.
    pub fn access(&self) -> AccessFlags {
        self.inner.access
    }

    /// The byte limit.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Counts `len` bytes lent where they lie in place of a region of this pool
    /// ([`PoolStats::lent_in_place`]).
    pub fn record_lent_in_place(&self, len: usize) {
        lock(&self.inner.state).lent_in_place += len as u64;
    }

    /// What the pool holds now.
    pub fn stats(&self) -> PoolStats {
        let st = lock(&self.inner.state);
        PoolStats {
            limit: self.inner.limit,
            registered: st.registered,
            in_use: st.in_use,
            regions_in_use: st.regions_in_use,
            waiting: st.queue.len(),
            registrations: st.registrations,
            lent_in_place: st.lent_in_place,
        }
    }

    /// Whether any region of the pool is shared as [`Bytes`] now (nothing to find
    /// otherwise: a sender may skip looking).
    pub fn has_shared(&self) -> bool {
        !lock(&self.inner.state).shared.is_empty()
    }

    /// The region shared as [`Bytes`] ([`PooledRegion::into_bytes`]) whose shared
    /// bytes hold all of `bytes`, if one does; the handle keeps it registered and
    /// out of the pool until dropped, whatever becomes of the `Bytes`.
    pub fn shared_containing(&self, bytes: &[u8]) -> Option<SharedRegion> {
        let start = bytes.as_ptr() as u64;
        let end = start.checked_add(bytes.len() as u64)?;
        let st = lock(&self.inner.state);
        let (&base, weak) = st.shared.range(..=start).next_back()?;
        let shared = weak.upgrade()?;
        (end <= base + shared.len as u64).then_some(SharedRegion { shared })
    }

    /// Queues a request for a region of at least `len` bytes. Refused at once only
    /// when `len` exceeds the whole limit (no amount of waiting would serve it).
    pub fn request(&self, len: usize) -> Result<Ticket> {
        let need = rounded(len);
        if need > self.inner.limit {
            return Err(Error::InvalidArgument(format!(
                "a message of {len} bytes exceeds the registered-memory pool's limit of {} bytes",
                self.inner.limit
            )));
        }
        let mut st = lock(&self.inner.state);
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push_back(Waiter {
            ticket,
            waker: None,
        });
        Ok(Ticket {
            pool: self.inner.clone(),
            ticket,
            need,
            done: false,
        })
    }

    /// A region of at least `len` bytes now, if no earlier request waits and room
    /// is free; `Ok(None)` otherwise (nothing is queued).
    pub fn try_take(&self, len: usize) -> Result<Option<PooledRegion>> {
        let mut t = self.request(len)?;
        t.try_take().transpose()
    }
}

impl Inner {
    /// Serves `need` bytes from the free regions or a new registration within the
    /// limit, evicting free regions that do not fit; `None` when the regions in use
    /// leave no room.
    fn take(&self, st: &mut State, need: usize) -> Option<Result<MemoryRegion>> {
        // Best fit among free regions that waste at most half.
        let best = st
            .free
            .iter()
            .enumerate()
            .filter(|(_, m)| m.len() >= need && m.len() <= 2 * need)
            .min_by_key(|(_, m)| m.len())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return Some(Ok(st.free.swap_remove(i)));
        }
        if st.in_use + need > self.limit {
            return None;
        }
        // Room exists once free regions of other sizes go: evict largest first.
        st.free.sort_by_key(|m| m.len());
        while st.registered + need > self.limit {
            let m = st.free.pop().expect("in_use + need <= limit");
            st.registered -= m.len();
        }
        Some(self.pd.alloc_bulk_mr(need, self.access).inspect(|_| {
            st.registered += need;
            st.registrations += 1;
        }))
    }

    /// The waker of the request now first in line, to wake once the lock is let go
    /// (a waker may take other locks, or this one).
    fn head_waker(st: &mut State) -> Option<Waker> {
        st.queue.front_mut().and_then(|w| w.waker.take())
    }
}

impl Ticket {
    /// The region, if this request is first in line and room is free.
    pub fn try_take(&mut self) -> Option<Result<PooledRegion>> {
        self.poll_with(None)
    }

    fn poll_with(&mut self, waker: Option<&Waker>) -> Option<Result<PooledRegion>> {
        assert!(!self.done, "ticket polled after it was served");
        let mut st = lock(&self.pool.state);
        let head = st.queue.front().map(|w| w.ticket);
        if head == Some(self.ticket) {
            if let Some(r) = self.pool.take(&mut st, self.need) {
                st.queue.pop_front();
                self.done = true;
                let r = r.map(|mr| {
                    st.in_use += mr.len();
                    st.regions_in_use += 1;
                    PooledRegion {
                        mr: Some(mr),
                        pool: self.pool.clone(),
                    }
                });
                // The next in line may fit in what is left.
                let next = Inner::head_waker(&mut st);
                drop(st);
                if let Some(w) = next {
                    w.wake();
                }
                return Some(r);
            }
        }
        if let Some(w) = waker {
            if let Some(me) = st.queue.iter_mut().find(|w| w.ticket == self.ticket) {
                me.waker = Some(w.clone());
            }
        }
        None
    }
}

impl Future for Ticket {
    type Output = Result<PooledRegion>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.poll_with(Some(cx.waker())) {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut st = lock(&self.pool.state);
        if let Some(i) = st.queue.iter().position(|w| w.ticket == self.ticket) {
            st.queue.remove(i);
            if i == 0 {
                let next = Inner::head_waker(&mut st);
                drop(st);
                if let Some(w) = next {
                    w.wake();
                }
            }
        }
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ticket({} bytes)", self.need)
    }
}

impl PooledRegion {
    /// The registration (what a memory window is bound to).
    pub fn mr(&self) -> &MemoryRegion {
        self.mr.as_ref().expect("present until drop")
    }

    /// Registered bytes (at least what was asked for).
    pub fn len(&self) -> usize {
        self.mr().len()
    }

    /// Whether the region has no bytes (never: regions are at least one grain).
    pub fn is_empty(&self) -> bool {
        self.mr().is_empty()
    }

    /// Address of the first byte, as a peer's Read names it.
    pub fn addr(&self) -> u64 {
        self.mr().addr()
    }

    /// The key a peer's Read names.
    pub fn rkey(&self) -> u32 {
        self.mr().rkey()
    }

    /// An SGE for `len` bytes at `offset` (the target of a local RDMA Read).
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        self.mr().sge(offset, len)
    }

    /// The bytes, to encode a message into before it is lent.
    pub fn buf_mut(&mut self) -> &mut [u8] {
        let mr = self.mr.as_ref().expect("present until drop");
        // SAFETY: `&mut self` is the only handle to the region; no local WR targets
        // it unless its poster (an `unsafe` post) promised to leave it untouched until
        // completion; peers may only read it (no REMOTE_WRITE), which cannot make this
        // slice change under us.
        unsafe { mr.slice_mut(0, mr.len()) }
    }

    /// Bytes `0..len` as [`Bytes`] sharing the region (no copy); the region returns
    /// to the pool when the last clone drops.
    ///
    /// # Panics
    /// If `len` exceeds the region.
    pub fn into_bytes(self, len: usize) -> Bytes {
        assert!(
            len <= self.len(),
            "{len} bytes of a {}-byte region",
            self.len()
        );
        let pool = self.pool.clone();
        let shared = Arc::new(Shared { region: self, len });
        lock(&pool.state)
            .shared
            .insert(shared.region.addr(), Arc::downgrade(&shared));
        Bytes::from_owner(SharedOwner(shared))
    }
}

/// A region shared as [`Bytes`]: back in the pool when the last of them and the
/// last [`SharedRegion`] drop.
struct Shared {
    region: PooledRegion,
    len: usize,
}

impl Shared {
    fn bytes(&self) -> &[u8] {
        // SAFETY: in bounds (checked by `into_bytes`); the region was handed over by
        // value, so any local Read into it completed (its poster's contract), and no
        // peer may write it (registered without REMOTE_WRITE).
        unsafe { self.region.mr().slice(0, self.len) }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Unlisted before the region goes back (its field drops after this).
        lock(&self.region.pool.state)
            .shared
            .remove(&self.region.addr());
    }
}

/// The owner behind [`PooledRegion::into_bytes`].
struct SharedOwner(Arc<Shared>);

impl AsRef<[u8]> for SharedOwner {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// A region shared as [`Bytes`], held registered and out of its pool while this
/// handle lives: what a sender lending such bytes where they lie keeps until its
/// peer read them. Found by [`RegionPool::shared_containing`].
#[derive(Clone)]
pub struct SharedRegion {
    shared: Arc<Shared>,
}

impl SharedRegion {
    /// The registration (what a memory window is bound to).
    pub fn mr(&self) -> &MemoryRegion {
        self.shared.region.mr()
    }

    /// Counts `len` of its bytes as lent to a peer where they lie
    /// ([`PoolStats::lent_in_place`]).
    pub fn record_lent(&self, len: usize) {
        lock(&self.shared.region.pool.state).lent_in_place += len as u64;
    }
}

impl std::fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SharedRegion({} bytes at {:#x})",
            self.shared.len,
            self.shared.region.addr()
        )
    }
}

impl Drop for PooledRegion {
    fn drop(&mut self) {
        let Some(mr) = self.mr.take() else { return };
        let mut st = lock(&self.pool.state);
        st.in_use -= mr.len();
        st.regions_in_use -= 1;
        st.free.push(mr);
        let next = Inner::head_waker(&mut st);
        drop(st);
        if let Some(w) = next {
            w.wake();
        }
    }
}

impl std::fmt::Debug for PooledRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PooledRegion({} bytes at {:#x})",
            self.len(),
            self.addr()
        )
    }
}

impl std::fmt::Debug for RegionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionPool")
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    fn pool(limit: usize) -> RegionPool {
        let dev = Device::open_soft(crate::SoftConfig::default()).expect("soft device");
        RegionPool::new(&dev.alloc_pd().expect("pd"), limit)
    }

    #[test]
    fn regions_are_reused_not_registered_again() {
        let p = pool(8 * GRAIN);
        let mut r = p.try_take(100_000).unwrap().expect("room");
        assert_eq!(r.len(), 2 * GRAIN);
        r.buf_mut()[..3].copy_from_slice(b"abc");
        let addr = r.addr();
        drop(r);
        let r = p.try_take(2 * GRAIN - 1).unwrap().expect("room");
        assert_eq!(r.addr(), addr, "the free region of that size came back");
        assert_eq!(p.stats().registrations, 1);
        let b = r.into_bytes(3);
        assert_eq!(&b[..], b"abc");
        assert_eq!(p.stats().regions_in_use, 1);
        drop(b);
        assert_eq!((p.stats().in_use, p.stats().registered), (0, 2 * GRAIN));
    }

    #[test]
    fn the_limit_holds_and_requests_wait_in_order_of_arrival() {
        let p = pool(4 * GRAIN);
        let a = p.try_take(3 * GRAIN).unwrap().expect("room");
        let mut first = p.request(2 * GRAIN).unwrap();
        let mut second = p.request(GRAIN).unwrap();
        assert!(first.try_take().is_none(), "no room");
        assert!(
            second.try_take().is_none(),
            "a grain is free, but an earlier request waits"
        );
        assert!(
            p.try_take(GRAIN).unwrap().is_none(),
            "nor may a newcomer jump it"
        );
        assert_eq!(p.stats().waiting, 2);
        drop(a);
        let f = first.try_take().expect("served").unwrap();
        let s = second.try_take().expect("served next").unwrap();
        // The first reused the 3-grain region (it wastes less than half).
        assert_eq!((f.len(), s.len()), (3 * GRAIN, GRAIN));
        assert_eq!(p.stats().registered, p.limit());
        drop((f, s));
        assert_eq!(p.stats().in_use, 0);
    }

    #[test]
    fn a_dropped_ticket_gives_up_its_place() {
        let p = pool(2 * GRAIN);
        let a = p.try_take(2 * GRAIN).unwrap().expect("room");
        let first = p.request(2 * GRAIN).unwrap();
        let mut second = p.request(GRAIN).unwrap();
        drop(first);
        drop(a);
        assert!(second.try_take().is_some());
        assert_eq!(p.stats().waiting, 0);
    }

    #[test]
    fn free_regions_of_other_sizes_are_evicted_for_room() {
        let p = pool(4 * GRAIN);
        drop(p.try_take(GRAIN).unwrap().expect("room"));
        drop(p.try_take(3 * GRAIN).unwrap().expect("room"));
        // 4 grains registered and free; a 4-grain request fits neither region.
        let r = p.try_take(4 * GRAIN).unwrap().expect("room after eviction");
        assert_eq!(r.len(), 4 * GRAIN);
        assert_eq!(p.stats().registered, p.limit());
        assert_eq!(p.stats().registrations, 3);
    }

    #[test]
    fn shared_bytes_are_found_by_address_and_held_by_their_handle() {
        let p = pool(4 * GRAIN);
        let mut r = p.try_take(GRAIN).unwrap().expect("room");
        r.buf_mut()[..6].copy_from_slice(b"abcdef");
        assert!(!p.has_shared());
        let b = r.into_bytes(6);
        assert!(p.has_shared());
        let found = p
            .shared_containing(&b[1..4])
            .expect("inside the shared bytes");
        assert_eq!(found.mr().addr(), b.as_ptr() as u64);
        assert!(
            p.shared_containing(&b"abcdef"[..]).is_none(),
            "other memory"
        );
        assert!(
            p.shared_containing(&b.slice(4..6)).is_some(),
            "the tail too"
        );
        drop(b);
        assert_eq!(p.stats().regions_in_use, 1, "the handle holds the region");
        found.record_lent(3);
        assert_eq!(p.stats().lent_in_place, 3);
        drop(found);
        assert_eq!(p.stats().regions_in_use, 0, "back once the handle went");
        assert!(!p.has_shared(), "unlisted");
        assert_eq!(p.stats().in_use, 0);
        let again = p.try_take(GRAIN).unwrap().expect("room").into_bytes(1);
        assert!(
            p.shared_containing(&again).is_some(),
            "the region is listed again once shared again"
        );
    }

    #[test]
    fn a_message_larger_than_the_pool_is_refused_naming_the_limit() {
        let p = pool(4 * GRAIN);
        let e = p.request(4 * GRAIN + 1).unwrap_err().to_string();
        assert!(e.contains(&(4 * GRAIN).to_string()), "{e}");
    }
}
