//! Completion queues: a preallocated ring of completions, and the place where a
//! polling application drives the progress of the QPs that complete into it.
//!
//! Manual progress: `poll` first makes progress on this CQ's QPs (reads their
//! sockets, processes frames, flushes pending output, runs timers), then pops. With a
//! few QPs it simply tries each (one `read` per QP, like a raw TCP poller); with many it
//! asks its epoll set which sockets are ready, so a server with hundreds of
//! connections does not issue a read per connection per poll.
//!
//! Waiting: `event_fd` is that epoll set (level-triggered): the QPs' sockets, the
//! device's UDP socket when UD QPs complete here, and an eventfd signalled when a
//! completion lands in an armed CQ from outside its own poll. Readable means "poll now".
//!
//! Shared-memory QPs (`shm`) have no socket to wake on while both sides poll: in
//! epoll mode a poll also visits every member whose inbox holds bytes (one atomic
//! load each). A poller about to sleep asks their peers to ring the inboxes'
//! doorbells (eventfds in the epoll set) for the next bytes: when it arms the CQ, in
//! the poll that follows (and the polls of its drain, each a full batch), and in
//! [`Cq::prepare_sleep`]. A poll after those means the poller is spinning again: it
//! withdraws the request, so that no doorbell is rung, and no system call made on
//! either side, per message while both sides poll.
//!
//! Overrun: a push into a full ring puts the CQ in error (`poll` returns
//! `CqOverrun`, `CqErr` is raised); its QPs see it and move to ERR.

use std::cell::Cell;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::error::{Error, Result};
use crate::event::{AsyncEvent, ObjectId};
use crate::wc::{WcStatus, WorkCompletion};

use super::device::{next_object_id, Device};
use super::qp::Qp;
use super::rc::WRITE_PER_POLL;
use super::shm::Inbox;
use super::sys::{self, Epoll, EventFd};
use super::wrap::wrap;

/// Up to this many QPs, a poll tries every QP directly instead of asking epoll.
const DIRECT_MAX: usize = 4;
/// Every QP of a CQ runs its timers at least this often, even in epoll mode (the
/// retry budget is coarse; RNR back-offs ask for visits through `defer`).
const SWEEP_NS: u64 = 10_000_000;

/// CQs of one device that watch its UDP socket in their epoll sets. Every watcher
/// wakes on every datagram, and the kernel refuses more than 500 epoll sets watching
/// one socket through a second level (as each CQ's set is, inside tokio's): with one
/// CQ per UD session, the 501st session failed (`EINVAL`) and each datagram woke every
/// session. Other CQs learn of their datagrams from whoever drains the socket (a
/// watcher, any polling CQ, or the helper), through their notify descriptor.
const MAX_UD_WATCHERS: u32 = 4;

const TOKEN_NOTIFY: u64 = u64::MAX;
const TOKEN_UD: u64 = u64::MAX - 1;

thread_local! {
    /// The CQ whose `poll` this thread is inside (0: none), and whether completions
    /// pushed meanwhile skipped their wake-up (`Some(true)`: one was solicited or an
    /// error).
    static POLLING: Cell<(u64, Option<bool>)> = const { Cell::new((0, None)) };
}

const ARM_NONE: u8 = 0;
const ARM_ANY: u8 = 1;
const ARM_SOLICITED: u8 = 2;

struct Ring {
    buf: Box<[WorkCompletion]>,
    head: usize,
    len: usize,
}

#[derive(Default)]
struct Members {
    qps: HashMap<u32, Weak<Qp>>,
    scratch: Vec<u32>,
    /// QPs whose inboxes hold bytes (scratch of `progress`).
    ready: Vec<u32>,
}

/// A soft completion queue.
pub(crate) struct Cq {
    pub(crate) dev: Arc<Device>,
    id: u64,
    cap: u32,
    // One lock per CQ ring: uncontended unless another thread completes into this CQ
    // while it is polled, and held only for a copy of a few words.
    ring: Mutex<Ring>,
    overrun: AtomicBool,
    armed: AtomicU8,
    notify: EventFd,
    /// `notify` may be readable (lets `consume_events` skip a syscall when not).
    signaled: AtomicBool,
    epoll: Epoll,
    // Taken by this CQ's poller for the whole progress pass (and briefly at QP
    // creation): uncontended unless the same CQ is polled from two threads at once.
    members: Mutex<Members>,
    deferred: Mutex<Vec<u32>>,
    has_deferred: AtomicBool,
    /// Inboxes of member QPs on shared memory (a leaf lock: taken under a QP's), and
    /// whether another CQ watches the same inbox.
    inboxes: Mutex<Vec<(u32, Weak<Inbox>, bool)>>,
    /// This CQ's poller asked its inboxes' peers to ring (see the module docs).
    announced: AtomicBool,
    ud_qps: AtomicU32,
    /// The device's UDP socket is in `epoll` (see [`MAX_UD_WATCHERS`]).
    watches_ud: AtomicBool,
    last_poll: AtomicU64,
    next_sweep: AtomicU64,
    /// Polls so far, and their count when the CQ was last armed: together they tell
    /// whether the poller sleeps (see [`Cq::asleep`]).
    polls: AtomicU64,
    armed_at: AtomicU64,
    /// Member QPs whose output waits for their socket (see `Qp::set_stalled`).
    pub(crate) stalled: AtomicU32,
    /// Member QPs that owe ACKs of several messages (see `Qp::set_owes_acks`).
    pub(crate) owing_acks: AtomicU32,
}

impl Cq {
    pub(crate) fn new(dev: Arc<Device>, cap: u32) -> std::io::Result<Cq> {
        let notify = EventFd::new()?;
        let epoll = Epoll::new()?;
        epoll.add(notify.raw(), TOKEN_NOTIFY)?;
        Ok(Cq {
            dev,
            id: next_object_id(),
            cap,
            ring: Mutex::new(Ring {
                buf: vec![WorkCompletion::default(); cap as usize].into_boxed_slice(),
                head: 0,
                len: 0,
            }),
            overrun: AtomicBool::new(false),
            armed: AtomicU8::new(ARM_NONE),
            notify,
            signaled: AtomicBool::new(false),
            epoll,
            members: Mutex::new(Members::default()),
            deferred: Mutex::new(Vec::new()),
            has_deferred: AtomicBool::new(false),
            inboxes: Mutex::new(Vec::new()),
            announced: AtomicBool::new(false),
            ud_qps: AtomicU32::new(0),
            watches_ud: AtomicBool::new(false),
            last_poll: AtomicU64::new(0),
            next_sweep: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            armed_at: AtomicU64::new(0),
            stalled: AtomicU32::new(0),
            owing_acks: AtomicU32::new(0),
        })
    }

    pub(crate) fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let now = self.dev.now_ns();
        self.last_poll.store(now, Ordering::Relaxed);
        // Load and store, not an atomic add: one poller is the rule, and a count off
        // by one under concurrent polls only delays the helper to its next tick.
        let polls = self.polls.load(Ordering::Relaxed);
        self.polls.store(polls + 1, Ordering::Relaxed);
        let outer = POLLING.with(|p| p.replace((self.id, None)));
        self.progress(now);
        // The poll that follows arming (or continues its drain) precedes a sleep: it
        // renews the request to ring, which it may have spent on the bytes it just
        // read. Any other poll is a poller spinning: it withdraws the request.
        let draining = self.armed.load(Ordering::Relaxed) != ARM_NONE
            && polls == self.armed_at.load(Ordering::Relaxed);
        if draining {
            self.announce_sleep();
        } else if self.announced.load(Ordering::Relaxed) {
            self.withdraw_sleep();
        }
        let (_, skipped) = POLLING.with(|p| p.replace(outer));
        let mut r = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        if self.overrun.load(Ordering::Relaxed) {
            return Err(Error::CqOverrun);
        }
        let n = r.len.min(wc.len());
        let cap = r.buf.len();
        for slot in wc.iter_mut().take(n) {
            *slot = r.buf[r.head];
            r.head = wrap(r.head + 1, cap);
        }
        r.len -= n;
        let left = r.len;
        drop(r);
        if draining && n > 0 && n == wc.len() {
            // A full batch: the poller drains on before it sleeps.
            self.armed_at.store(polls + 1, Ordering::Relaxed);
        }
        if let Some(urgent) = skipped.filter(|_| left > 0) {
            // Completions this poll made but did not return: wake whoever waits.
            self.wake_if_armed(urgent);
        }
        Ok(n)
    }

    /// Makes progress on every QP that completes into this CQ and has something to do.
    ///
    /// Up to [`DIRECT_MAX`] QPs: each is read directly (one syscall per QP, no epoll).
    /// Beyond: only the sockets epoll reports ready are read; QPs that asked for a
    /// visit (`defer`) and, every [`SWEEP_NS`], all QPs run their timers and flush
    /// output without a read.
    pub(crate) fn progress(&self, now: u64) {
        let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let sweep = now >= self.next_sweep.load(Ordering::Relaxed);
        if sweep {
            self.next_sweep.store(now + SWEEP_NS, Ordering::Relaxed);
            m.qps.retain(|_, w| w.strong_count() > 0);
            self.inboxes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(_, w, _)| w.strong_count() > 0);
        }
        if m.qps.len() <= DIRECT_MAX {
            if self.ud_qps.load(Ordering::Relaxed) > 0 {
                self.dev.ud_drain();
            }
            for w in m.qps.values() {
                if let Some(qp) = w.upgrade() {
                    qp.progress(now, true, WRITE_PER_POLL);
                }
            }
            return;
        }
        let mut evs = sys::events::<64>();
        for ev in self.epoll.wait(&mut evs, 0) {
            match ev.u64 {
                TOKEN_NOTIFY => {}
                TOKEN_UD => self.dev.ud_drain(),
                token => {
                    let qp = m.qps.get(&(token as u32)).and_then(Weak::upgrade);
                    if let Some(qp) = qp {
                        if qp.progress(now, true, WRITE_PER_POLL) {
                            self.defer(qp.qpn);
                        }
                    }
                }
            }
        }
        let mut ready = std::mem::take(&mut m.ready);
        ready.extend(
            self.inboxes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter(|(_, w, _)| w.upgrade().is_some_and(|i| i.has_data()))
                .map(|(q, _, _)| *q),
        );
        for qpn in ready.drain(..) {
            if let Some(qp) = m.qps.get(&qpn).and_then(Weak::upgrade) {
                if qp.progress(now, true, WRITE_PER_POLL) {
                    self.defer(qpn);
                }
            }
        }
        m.ready = ready;
        if self.has_deferred.swap(false, Ordering::Relaxed) {
            // Swap lists rather than allocate: `scratch` keeps its capacity.
            let mut list = std::mem::take(&mut m.scratch);
            std::mem::swap(
                &mut list,
                &mut *self.deferred.lock().unwrap_or_else(|e| e.into_inner()),
            );
            for qpn in list.drain(..) {
                if let Some(qp) = m.qps.get(&qpn).and_then(Weak::upgrade) {
                    if qp.progress(now, false, WRITE_PER_POLL) {
                        self.defer(qpn);
                    }
                }
            }
            m.scratch = list;
        }
        if sweep {
            for w in m.qps.values() {
                if let Some(qp) = w.upgrade() {
                    if qp.progress(now, false, WRITE_PER_POLL) {
                        self.defer(qp.qpn);
                    }
                }
            }
        }
    }

    /// Asks the next poll to visit `qpn` even if its socket is not readable.
    pub(crate) fn defer(&self, qpn: u32) {
        if self
            .members
            .try_lock()
            .map(|m| m.qps.len() <= DIRECT_MAX)
            .unwrap_or(false)
        {
            return; // every poll visits every QP anyway
        }
        let mut d = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        if !d.contains(&qpn) {
            d.push(qpn);
        }
        self.has_deferred.store(true, Ordering::Relaxed);
    }

    /// Adds a completion; `false` if the CQ is (or just became) overrun.
    pub(crate) fn push(&self, wc: WorkCompletion, solicited: bool) -> bool {
        {
            let mut r = self.ring.lock().unwrap_or_else(|e| e.into_inner());
            if self.overrun.load(Ordering::Relaxed) {
                return false;
            }
            let cap = r.buf.len();
            if r.len == cap {
                self.overrun.store(true, Ordering::Relaxed);
                drop(r);
                self.dev.raise(AsyncEvent::CqErr(ObjectId(self.id)));
                self.signal();
                return false;
            }
            let tail = wrap(r.head + r.len, cap);
            r.buf[tail] = wc;
            r.len += 1;
        }
        // Completions made by this CQ's own poll are popped by that same call: waking
        // the poller for them would only cost an eventfd write and a spurious wake-up.
        let urgent = solicited || wc.status != WcStatus::Success;
        let own = POLLING.with(|p| {
            let (id, skipped) = p.get();
            if id == self.id {
                p.set((id, Some(skipped.unwrap_or(false) || urgent)));
            }
            id == self.id
        });
        if !own {
            self.wake_if_armed(urgent);
        }
        true
    }

    /// Signals the event descriptor if the CQ is armed for this kind of completion.
    fn signal(&self) {
        // Flag first: a `consume_events` racing with us either sees the flag and
        // drains, or runs before and leaves the fresh signal readable.
        self.signaled.store(true, Ordering::Release);
        self.notify.signal();
    }

    /// `urgent`: solicited or an error, which also wakes a solicited-only arming.
    fn wake_if_armed(&self, urgent: bool) {
        let armed = self.armed.load(Ordering::Acquire);
        let wake = armed == ARM_ANY || (armed == ARM_SOLICITED && urgent);
        if wake && self.armed.swap(ARM_NONE, Ordering::AcqRel) != ARM_NONE {
            self.signal();
        }
    }

    pub(crate) fn is_overrun(&self) -> bool {
        self.overrun.load(Ordering::Relaxed)
    }

    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.req_notify_before_poll(solicited_only);
        // The poller may sleep without polling first.
        self.announce_sleep();
        Ok(())
    }

    /// [`Cq::req_notify`] for a caller that polls next: that poll asks the peers of
    /// the shared-memory QPs to ring, after it has read what they sent. Asked here
    /// too, a poller woken by a doorbell would find the bytes that rang it still
    /// waiting and ring its own bell for them (a write and a read for nothing).
    pub(crate) fn req_notify_before_poll(&self, solicited_only: bool) {
        let v = if solicited_only {
            ARM_SOLICITED
        } else {
            ARM_ANY
        };
        self.armed_at
            .store(self.polls.load(Ordering::Relaxed), Ordering::Relaxed);
        self.armed.store(v, Ordering::SeqCst);
        // The poller is about to sleep: output a member QP could not finish (a Read
        // response behind a full socket) is the helper's from now on.
        if self.stalled.load(Ordering::SeqCst) > 0 {
            self.dev.helper.poke();
        }
    }

    /// The poller of an armed CQ sleeps now on the event descriptor, without arming
    /// and polling again (it did so before it last found the CQ empty, and may have
    /// spun since): asks the peers of its shared-memory QPs to ring for their next
    /// bytes, and counts as asleep (see [`Cq::asleep`]). Returns whether bytes
    /// already wait in one of their inboxes: then the caller polls instead (ringing
    /// its own bell for them would cost a write, a read and a wake-up); likewise when
    /// a member owes ACKs, which that poll sends. Unarmed, an event is already on its
    /// way.
    pub(crate) fn prepare_sleep(&self) -> bool {
        if self.armed.load(Ordering::SeqCst) == ARM_NONE {
            return false;
        }
        self.armed_at
            .store(self.polls.load(Ordering::Relaxed), Ordering::Relaxed);
        self.announced.store(true, Ordering::Relaxed);
        let mut input = false;
        for (_, w, _) in self
            .inboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            input |= w.upgrade().is_some_and(|i| i.ask_to_be_rung());
        }
        if self.stalled.load(Ordering::SeqCst) > 0 {
            self.dev.helper.poke();
        }
        // A member owes ACKs that would otherwise wait for the helper's tick while its
        // peer's sends stay incomplete: poll instead, a pass that sends them (in it the
        // CQ counts as asleep, see `rc::acks_owed`).
        input || self.owing_acks.load(Ordering::SeqCst) > 0
    }

    /// Whether the poller sleeps on the event descriptor: the CQ is armed and was
    /// polled at most once since it was armed or its poller said it sleeps (the poll
    /// that follows arming, before the sleep).
    pub(crate) fn asleep(&self) -> bool {
        self.armed.load(Ordering::SeqCst) != ARM_NONE
            && self.polls.load(Ordering::Relaxed) <= self.armed_at.load(Ordering::Relaxed) + 1
    }

    /// Nobody makes progress through this CQ: its poller sleeps, or has not polled
    /// for `idle_ns`.
    pub(crate) fn neglected(&self, now: u64, idle_ns: u64) -> bool {
        self.asleep() || now.saturating_sub(self.last_poll()) >= idle_ns
    }

    /// Asks the peers of this CQ's shared-memory QPs to ring for their next bytes. A
    /// ring is a one-shot request (a publish consumes it), so a poller about to sleep
    /// renews it after each poll: the poll may have read the very bytes whose ring it
    /// spent.
    fn announce_sleep(&self) {
        self.announced.store(true, Ordering::Relaxed);
        for (_, w, _) in self
            .inboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            if w.upgrade().is_some_and(|i| i.announce_sleep()) {
                super::device::bump(&self.dev.stats.rc_shm_doorbells);
            }
        }
    }

    /// The poller spins again: takes back the requests to ring [`Cq::announce_sleep`]
    /// made, except on inboxes another CQ watches too (whose poller may sleep).
    fn withdraw_sleep(&self) {
        self.announced.store(false, Ordering::Relaxed);
        for (_, w, shared) in self
            .inboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            if let Some(i) = w.upgrade().filter(|_| !shared) {
                i.withdraw_sleep();
            }
        }
    }

    pub(crate) fn event_fd(&self) -> RawFd {
        self.epoll.raw()
    }

    pub(crate) fn consume_events(&self) {
        if self.signaled.swap(false, Ordering::AcqRel) {
            self.notify.drain();
        }
    }

    pub(crate) fn capacity(&self) -> u32 {
        self.cap
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn has_ud(&self) -> bool {
        self.ud_qps.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn last_poll(&self) -> u64 {
        self.last_poll.load(Ordering::Relaxed)
    }

    pub(crate) fn attach(&self, qp: &Arc<Qp>, ud: bool) {
        let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        m.qps.insert(qp.qpn, Arc::downgrade(qp));
        if ud && self.ud_qps.fetch_add(1, Ordering::Relaxed) == 0 {
            let watchers = &self.dev.ud_watchers;
            if watchers.fetch_add(1, Ordering::Relaxed) < MAX_UD_WATCHERS
                && self.epoll.add(self.dev.udp_fd(), TOKEN_UD).is_ok()
            {
                self.watches_ud.store(true, Ordering::Relaxed);
            } else {
                watchers.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Forgets member QPs and inboxes that were dropped (the sweep in `progress`
    /// does too, but only while the CQ is polled), and the room they took.
    pub(crate) fn forget_dead_members(&self) {
        let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        m.qps.retain(|_, w| w.strong_count() > 0);
        super::compact::shrink_map(&mut m.qps);
        let mut inboxes = self.inboxes.lock().unwrap_or_else(|e| e.into_inner());
        inboxes.retain(|(_, w, _)| w.strong_count() > 0);
        super::compact::shrink_vec(&mut inboxes);
    }

    /// Member QPs listed (live or not yet forgotten) and the room their table has.
    #[cfg(test)]
    pub(crate) fn members(&self) -> (usize, usize) {
        let m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        (m.qps.len(), m.qps.capacity())
    }

    /// A UD QP of this CQ went away (lock-free: may run inside `progress`).
    pub(crate) fn ud_detach(&self) {
        if self.ud_qps.fetch_sub(1, Ordering::Relaxed) == 1
            && self.watches_ud.swap(false, Ordering::Relaxed)
        {
            self.epoll.remove(self.dev.udp_fd());
            self.dev.ud_watchers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Visits `qpn` whenever `inbox` holds bytes, and asks its peer for a doorbell
    /// when this CQ's poller sleeps (`shared`: another CQ watches it too).
    pub(crate) fn watch_inbox(&self, qpn: u32, inbox: &Arc<Inbox>, shared: bool) {
        self.inboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((qpn, Arc::downgrade(inbox), shared));
    }

    /// Watches a QP's socket, so that `event_fd` wakes on its traffic.
    pub(crate) fn watch(&self, fd: RawFd, qpn: u32) {
        let _ = self.epoll.add(fd, u64::from(qpn));
    }

    /// Stops watching a socket that outlives its QP (`held_for_peer`): readable
    /// until its peer closes it, it would wake this CQ's pollers for nothing.
    pub(crate) fn unwatch(&self, fd: RawFd) {
        self.epoll.remove(fd);
    }
}
