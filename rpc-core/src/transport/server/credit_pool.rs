//! The server's shared receive pool as credits: which connection may hold how many
//! of the SRQ's receives, and the policy that moves each connection's window.
//!
//! Every RC connection starts at the minimal window (2) from its handshake, a small
//! bounded record until it proves its RDMA path (its first frame arrives on the QP).
//! Admission comes first: the pool keeps back the minimal windows of the
//! connections `Server::max_connections` still allows (at most half the pool), so
//! that windows grown by busy connections, which cannot be revoked while those
//! connections are idle (a revoke rides on an answer), never lock a newcomer out.
//! What is left over is *spare*, and windows grow only out of it. The policy, run by
//! the connection's driver on a frame it receives, before answering (so that
//! frame's own answer carries what it decides): on the first, on every one that
//! asks for credit, while revoked receives are to be returned, and on one in 16
//! otherwise (what keeps a unary call's cost flat):
//! * **Start**: a proven connection is raised to [`INITIAL_WINDOW`] if spare allows.
//! * **Grow**: a `WANT` frame or a `REQ` flagged `WANT_CREDIT` (a caller of that
//!   client waited for a token) doubles it, up to its cap (what it asked for, at most
//!   `Server::credits_per_connection` + 1), if spare allows.
//! * **Shrink**: while spare is low (below [`CreditPool::low_water`]), a connection
//!   above its fair share (the pool divided by the connections, at least 2) is
//!   moved down to it, one revoke per answer it sends.
//!
//! A connection's reservation is `max(window, target)` (see
//! [`CreditWindow::committed`]): taken from the pool before a target rises,
//! returned once the revoking answers have left, and all of it when the connection
//! ends. The sum of reservations never exceeds the SRQ's receives, which is the
//! RNR-free invariant of [`crate::engine::wire`].

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rpc_transport::msg::SendRing;
use rpc_transport::ProtectionDomain;

use crate::engine::credit::MIN_WINDOW;
use crate::engine::{CreditWindow, ServerConn};
use crate::handshake::Reject;

/// The window a connection is raised to once proven (before asking for more).
pub(crate) const INITIAL_WINDOW: u32 = 8;

/// The SRQ's receives as credits.
pub(crate) struct CreditPool {
    /// Receives on the SRQ.
    total: u32,
    /// Receives not reserved by any connection.
    free: AtomicU32,
    /// RC connections holding a reservation.
    conns: AtomicU32,
    /// `Server::max_connections`.
    max_conns: u32,
}

impl CreditPool {
    pub(crate) fn new(total: u32, max_conns: usize) -> CreditPool {
        CreditPool {
            total,
            free: AtomicU32::new(total),
            conns: AtomicU32::new(0),
            max_conns: u32::try_from(max_conns).unwrap_or(u32::MAX),
        }
    }

    /// Receives kept back for connections yet to come: the minimal windows of those
    /// the limit still allows, at most half the pool.
    fn admission_reserve(&self) -> u32 {
        let room = self
            .max_conns
            .saturating_sub(self.conns.load(Ordering::Acquire));
        room.saturating_mul(MIN_WINDOW).min(self.total / 2)
    }

    /// Free receives windows may grow into.
    pub(crate) fn spare(&self) -> u32 {
        self.free().saturating_sub(self.admission_reserve())
    }

    /// Receives not reserved.
    pub(crate) fn free(&self) -> u32 {
        self.free.load(Ordering::Acquire)
    }

    /// Below this many spare receives windows above the fair share shrink.
    pub(crate) fn low_water(&self) -> u32 {
        (self.total / 8).min(64)
    }

    /// Takes `n` receives if all are free.
    fn take(&self, n: u32) -> bool {
        self.free
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| f.checked_sub(n))
            .is_ok()
    }

    /// Takes up to `n` spare receives for a window's growth: how many it took.
    fn take_spare(&self, n: u32) -> u32 {
        let keep = self.admission_reserve();
        let mut took = 0;
        let _ = self
            .free
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                took = f.saturating_sub(keep).min(n);
                (took > 0).then(|| f - took)
            });
        took
    }

    fn give(&self, n: u32) {
        self.free.fetch_add(n, Ordering::AcqRel);
    }

    /// A new connection's handshake grant of `n` receives: refused beyond
    /// `Server::max_connections`, or when the receives are not free.
    pub(crate) fn admit(&self, n: u32) -> Result<(), Reject> {
        let limit = self.max_conns;
        self.conns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                (c < limit).then_some(c + 1)
            })
            .map_err(|_| Reject::ConnectionLimit { limit })?;
        if !self.take(n) {
            self.conns.fetch_sub(1, Ordering::AcqRel);
            return Err(Reject::NoReceiveCredits);
        }
        Ok(())
    }

    /// A connection ended (or its handshake failed after [`CreditPool::admit`]):
    /// everything it reserved comes back.
    pub(crate) fn leave(&self, reserved: u32) {
        self.give(reserved);
        self.conns.fetch_sub(1, Ordering::AcqRel);
    }

    /// The fair share of a connection now.
    fn fair_share(&self) -> u32 {
        (self.total / self.conns.load(Ordering::Acquire).max(1)).max(MIN_WINDOW)
    }

    /// Moves `w`'s target by the policy (module docs) and settles its reservation
    /// with the pool. Cheap when nothing moves: two atomic loads.
    pub(crate) fn settle(&self, w: &mut CreditWindow) {
        if !w.is_dynamic() {
            return;
        }
        let mut target = w.target();
        let wanted = w.take_wanted();
        if self.spare() < self.low_water() {
            target = target.min(self.fair_share());
        } else if w.proven() {
            target = target.max(INITIAL_WINDOW);
            if wanted {
                // Its callers wait: double the window (the pool permitting).
                target = target.max(w.window().saturating_mul(2));
            }
        }
        let target = target.clamp(MIN_WINDOW, w.max());
        let need = w.window().max(target);
        let mut target = target;
        if need > w.reserved {
            // As much of it as the pool has spare.
            w.reserved += self.take_spare(need - w.reserved);
            target = target.min(w.reserved);
        }
        w.set_target(target);
        if w.committed() < w.reserved {
            self.give(w.reserved - w.committed());
            w.reserved = w.committed();
        }
    }
}

/// What one connection's driver needs to settle its window: the pool, and the
/// protection domain its send ring grows in.
pub(crate) struct PeerCredit {
    pub(crate) pool: Arc<CreditPool>,
    pub(crate) pd: ProtectionDomain,
}

impl PeerCredit {
    /// Settles the connection's window with the pool, and grows its send ring to the
    /// window's target (doubling, so a growing connection registers memory a few
    /// times, not once per credit). A ring that cannot grow keeps its size: answers
    /// then wait for send slots in the connection's queue, as they do when all are
    /// in flight.
    pub(crate) fn settle(&self, engine: &mut ServerConn, ring: &mut SendRing) {
        let w = engine.credit_mut();
        if !w.needs_settle() {
            return;
        }
        self.pool.settle(w);
        let want = w.committed() as usize;
        let have = ring.capacity();
        if want > have {
            let extra = (have.max(want - have)).min(w.max() as usize - have);
            if let Err(e) = ring.grow(&self.pd, extra as u32) {
                tracing::debug!(error = %e, "send ring not grown");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::wire::CreditAdjust;

    fn proven(w: &mut CreditWindow) {
        // What the engine does when a frame arrives.
        w.on_frame(false);
    }

    #[test]
    fn an_unproven_connection_keeps_the_minimal_window() {
        let pool = CreditPool::new(100, 10);
        pool.admit(2).unwrap();
        let mut w = CreditWindow::dynamic(2, 257);
        pool.settle(&mut w);
        assert_eq!((w.target(), w.reserved, pool.free()), (2, 2, 98));
    }

    #[test]
    fn a_proven_connection_grows_to_the_initial_window_then_on_demand() {
        let pool = CreditPool::new(100, 10);
        pool.admit(2).unwrap();
        let mut w = CreditWindow::dynamic(2, 257);
        proven(&mut w);
        pool.settle(&mut w);
        assert_eq!(
            (w.target(), w.reserved, pool.free()),
            (INITIAL_WINDOW, 8, 92)
        );
        assert_eq!(w.next_adjust(255), CreditAdjust::Grant(6));
        w.on_frame(true); // its callers wait: the window doubles
        pool.settle(&mut w);
        assert_eq!((w.target(), w.reserved, pool.free()), (16, 16, 84));
        pool.leave(w.reserved);
        assert_eq!(pool.free(), 100);
    }

    #[test]
    fn a_tight_pool_shrinks_big_windows_and_returns_slots_as_revokes_leave() {
        let pool = CreditPool::new(40, 3); // low water 5, 2 x 2 kept for newcomers
        pool.admit(2).unwrap();
        let mut big = CreditWindow::dynamic(2, 257);
        proven(&mut big);
        for _ in 0..30 {
            big.on_frame(true);
            pool.settle(&mut big);
            while big.next_adjust(255) != CreditAdjust::Keep {}
        }
        assert!(
            pool.spare() < pool.low_water(),
            "grown until spare runs low"
        );
        assert_eq!(
            pool.free(),
            8,
            "4 kept back for the 2 connections still allowed"
        );
        let before = big.reserved;
        // Others arrive (into the receives kept for them): the fair share is 40 / 3.
        for _ in 0..2 {
            pool.admit(2).unwrap();
        }
        pool.settle(&mut big);
        assert_eq!(big.target(), MIN_WINDOW.max(40 / 3));
        assert_eq!(
            big.reserved, before,
            "nothing released before a revoke leaves"
        );
        assert_eq!(big.next_adjust(1), CreditAdjust::Revoke);
        pool.settle(&mut big);
        assert_eq!(big.reserved, before - 1, "one slot back per revoke sent");
    }
}
