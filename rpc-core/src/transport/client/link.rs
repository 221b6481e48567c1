//! What one transport's client connection (RC or UD) supplies to the shared driver.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use rpc_transport::msg::{Gathered, PooledRegion, RecvPool, Ticket};
use rpc_transport::WorkCompletion;
use tokio::sync::Notify;

use super::ReplySender;
use crate::engine::CallHead;
use crate::server::EncodeMessage;
use crate::status::Status;
use crate::transport::ready::ReadyWaiters;

/// Signals between callers, the driver task, the liveness watcher and (on RC) the
/// receive pool's repost hook, readable without the connection's lock.
#[derive(Default)]
pub(crate) struct Signals {
    /// Callers waiting in `poll_ready` for room to send.
    pub(crate) ready: ReadyWaiters,
    /// Work for the driver that no completion announces (queued frames whose credits
    /// came back, an earlier timer, shutdown).
    pub(crate) kick: Notify,
    /// Tells the liveness watcher to let go of the TCP connection.
    pub(crate) shutdown: Notify,
    /// The last handle is gone: the driver stops.
    pub(crate) closing: AtomicBool,
    /// The server said GOAWAY: no new call starts here; calls in flight finish.
    pub(crate) draining: AtomicBool,
    /// Someone polls the CQ and handles what it reaps: the driver (across its whole
    /// wait), or a caller waiting alone for its reply (`reap.rs`; within one poll of
    /// its future, never across a wait). So batches are handled in the order the CQ
    /// gave them.
    pub(crate) reaping: AtomicBool,
    /// The driver leaves the CQ to the one call open, whose caller reaps it, and
    /// waits for a kick or its timer only (`reap.rs` says when it comes back).
    pub(crate) aside: AtomicBool,
    /// Wakes the caller asleep on the CQ in the driver's place when the driver
    /// ended calls itself (a deadline, a failure, a Read it completed).
    pub(crate) reaper: Notify,
}

/// Send slots promised to callers by `poll_ready` and not yet used by a call: a
/// reservation takes a slot beyond them and the engine's own (a credit or a window
/// place); `start` redeems it.
#[derive(Debug, Default)]
pub(crate) struct SlotPromises(usize);

impl SlotPromises {
    /// Promises a slot if `free_slots` exceed those promised and `engine_reserve`
    /// (asked only then) grants its part.
    pub(crate) fn take(
        &mut self,
        free_slots: usize,
        engine_reserve: impl FnOnce() -> bool,
    ) -> bool {
        let ok = free_slots > self.0 && engine_reserve();
        self.0 += usize::from(ok);
        ok
    }

    /// A promise is used by a call or given back.
    pub(crate) fn redeem(&mut self) {
        self.0 -= 1;
    }

    /// Slots promised now.
    pub(crate) fn count(&self) -> usize {
        self.0
    }
}

pub(crate) use super::in_place::InPlace;

/// A call to start on a reservation.
pub(crate) struct NewCall<'a> {
    /// Where its reply goes.
    pub(crate) reply: ReplySender,
    pub(crate) head: CallHead<'a>,
    /// The request message, encoded straight into a send slot.
    pub(crate) body: &'a dyn EncodeMessage,
    /// A body that goes by reference ([`Link::region_for`], or in place), ready.
    pub(crate) region: Option<Lend>,
}

/// How a request body goes by reference, chosen before the connection's lock.
pub(crate) enum Lend {
    /// Encoded into the first `len` bytes of this region of the connection's lend
    /// pool: by `Conn::start`, outside the lock, or already (`encoded`: a large
    /// body, encoded on the blocking pool, `transport::encode_off`).
    Region {
        region: PooledRegion,
        len: usize,
        encoded: bool,
    },
    /// Its large `Bytes` lent where they lie, the rest inline (`in_place`).
    InPlace(Gathered),
}

impl Lend {
    /// The first `len` bytes of `region`, for `Conn::start` to encode into.
    pub(crate) fn unencoded(region: PooledRegion, len: usize) -> Lend {
        Lend::Region {
            region,
            len,
            encoded: false,
        }
    }
}

/// One transport's connection state under the connection's lock: its engine (RC
/// credits and fragments, or UD retransmission), its send slots and how it posts.
/// The shared driver (`conn.rs`) owns the lock, the CQ, the timer and the callers.
///
/// Every method that ends calls delivers their replies itself (to the
/// [`ReplySender`] given to [`Link::start`]).
pub(crate) trait Link: Send + Sized + 'static {
    /// Why the connection is unusable, if it is.
    fn dead(&self) -> Option<&Status>;

    /// Calls open (started, not yet ended).
    fn open_calls(&self) -> usize;

    /// Takes what one call needs (a credit or a window place, and a send slot);
    /// `false` if none is free now.
    fn reserve(&mut self) -> bool;

    /// Gives back an unused reservation.
    fn unreserve(&mut self);

    /// Reservations made and not yet used by a call or given back.
    fn reserved(&self) -> usize;

    /// For a request body of `body_len` bytes that goes by reference (RC with RDMA
    /// Read agreed, above the threshold), a place in line for a region of the
    /// connection's pool; `Some(Err)` when the body is larger than the whole pool.
    /// `None`: the body goes inline or in fragments.
    fn region_for(&self, _body_len: usize) -> Option<Result<Ticket, Status>> {
        None
    }

    /// The threshold above which [`Link::region_for`] may give a region (`None`:
    /// never), fixed for the connection's life.
    fn by_ref_above(&self) -> Option<usize> {
        None
    }

    /// Whether request bodies may be lent where their `Bytes` lie, and how
    /// (`in_place`); fixed for the connection's life.
    fn in_place(&self) -> Option<InPlace> {
        None
    }

    /// Starts a reserved call: encodes its request into a send slot and posts it
    /// (or leaves it for the driver to post with others). Returns the call id and
    /// the first engine timer the call set, if any (its deadline on RC; on UD its
    /// retransmission), which the driver must not sleep past.
    fn start(&mut self, sig: &Signals, call: NewCall<'_>)
        -> Result<(u32, Option<Instant>), Status>;

    /// The caller gave up on call `id` (its future was dropped).
    fn cancel(&mut self, sig: &Signals, id: u32);

    /// Handles a batch of completions of the connection's CQ, `pool` being its
    /// receive pool. Returns whether room to send came back. The clock is the
    /// link's to read if it needs it (UD does, RC does not).
    fn handle(&mut self, wcs: &[WorkCompletion], pool: &RecvPool) -> bool;

    /// The driver was kicked with no completion: send what waits.
    fn on_kick(&mut self);

    /// The engine's next timer (a deadline or a retransmission).
    fn poll_timeout(&mut self) -> Option<Instant>;

    /// Runs the engine's timers due at `now`. Returns whether calls ended.
    fn handle_timeout(&mut self, now: Instant) -> bool;

    /// Ends every call with `status`; the connection is unusable from now on.
    fn fail(&mut self, status: Status);
}
