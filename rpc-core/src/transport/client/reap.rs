//! A caller waiting alone for its reply reaps the connection's CQ itself.
//!
//! With one call in flight, the driver reaping the reply and handing it over through
//! the call's oneshot costs a task switch per call: the driver's poll, then the
//! caller's wake-up (often on the other worker, which tokio must unpark first).
//! Instead the caller asks the driver to step aside ([`Signals::aside`]), takes the
//! CQ ([`Signals::reaping`]), polls it between yields for as long as the completion
//! mode spins and then sleeps on its event: its reply arrives in its own task, and
//! the driver's task is not polled at all while calls come one at a time.
//!
//! No call may wait for a reply that nobody reaps. The driver steps aside only for
//! a call that is alone on its connection when it starts (no other call open, no
//! other reservation), decided under the connection's lock; any later call or
//! streaming call, and any caller waiting for room (which only reaped completions
//! bring back), calls it back ([`Conn::driver_reaps`]). A caller takes `reaping`
//! only within a poll of its future, never across a wait, so one whose future is
//! not polled for a while (held in a `select!`, say) delays only its own reply. It
//! gives the CQ back when it has its reply and other calls are open, and when it
//! is dropped. The driver keeps the engine's timers meanwhile, and wakes the
//! caller ([`Signals::reaper`]) when it ends the call itself (a deadline, a failed
//! connection) or is called back.
//!
//! Nor may a reply sit in its channel unlooked at. A spinning caller looks at its
//! channel every round and never sleeps. A sleeping caller watches its channel (it
//! is a branch of the `select!` it sleeps in), so a reply delivered by any other
//! party wakes it, even one it missed being called back for (a second call started
//! and ended, and a third started alone and set the driver aside again, all before
//! it looked). Only while it handles a batch it reaped itself does the channel hold
//! no waker of its own, so that its own reply does not wake it for a second poll; it
//! looks at the channel (`try_recv`) before it watches it again.
//!
//! [`Signals::aside`]: super::link::Signals::aside
//! [`Signals::reaping`]: super::link::Signals::reaping
//! [`Signals::reaper`]: super::link::Signals::reaper

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use rpc_transport::WorkCompletion;
use tokio::sync::oneshot::{self, error::TryRecvError};

use super::conn::Conn;
use super::link::Link;
use crate::client::IncomingReply;
use crate::status::Status;
use crate::transport::completion::{yield_stealable, CompletionMode, SpinClock, SpinTurns};

/// Where a caller's reply arrives.
pub(super) type ReplyReceiver = oneshot::Receiver<Result<IncomingReply, Status>>;

/// Waits for `rx` while reaping `conn`'s CQ: polls it between yields for as long
/// as the connection's mode spins, then sleeps on its event. The CQ is taken only
/// within a poll of this future, never across a wait: a caller whose future is not
/// polled for a while (held in a `select!`, say) keeps nobody else from reaping.
/// `None` if the driver was called back (another call started): the caller then
/// awaits `rx`.
pub(super) async fn reap_until_reply<L: Link>(
    conn: &Conn<L>,
    rx: &mut ReplyReceiver,
) -> Option<Result<IncomingReply, Status>> {
    // `Event` sleeps at once: its wait polls the CQ before it sleeps.
    let spin = match conn.mode() {
        CompletionMode::Busy => None,
        CompletionMode::Adaptive(_) => Some(conn.reap_spin.spin()),
        CompletionMode::Event => Some(Duration::ZERO),
    };
    let spins = spin != Some(Duration::ZERO);
    let sig = &conn.sig;
    let mut turn = Turn { conn, done: false };
    // A call's reply and its request's send completion, and a little more.
    let mut wcs = [WorkCompletion::default(); 4];
    let mut kicked = false;
    let mut kick_once = || {
        // The driver has the CQ, perhaps asleep on its event: kicked, it looks at
        // `aside` (spinning, it sees it by itself).
        if !std::mem::replace(&mut kicked, true) {
            sig.kick.notify_one();
        }
    };
    let mut spinning_since = None;
    let mut turns = SpinTurns::default();
    if spins {
        loop {
            // Not `poll`: a registered waker would make the reply's delivery (by this
            // very task) a wake-up and a reschedule.
            if let Some(r) = turn.reply(rx) {
                if spinning_since.is_some() {
                    conn.reap_spin.found();
                }
                return Some(r);
            }
            if turn.called_back() {
                return None;
            }
            match conn.reap(&mut wcs) {
                Some(true) => continue,
                Some(false) => {}
                None => kick_once(),
            }
            let clock = spinning_since.get_or_insert_with(SpinClock::start);
            if !turns.turn() {
                continue;
            }
            if spin.is_some_and(|d| clock.spun(d)) {
                break;
            }
            yield_stealable().await;
        }
    }
    // Asleep on the CQ's event, woken also when the driver ends the call itself (a
    // deadline, a failed connection, a Read it finished).
    // A caller that spun first tells the spin budget how long it then slept
    // (`SpinBudget::missed`); one that never spins (`Event`) reads no clock.
    let slept = spin
        .filter(|_| spinning_since.is_some())
        .map(|spun| (spun, Instant::now()));
    let missed = || {
        if let Some((spun, at)) = slept {
            conn.reap_spin.missed(spun, at.elapsed());
        }
    };
    loop {
        if let Some(r) = turn.reply(rx) {
            missed();
            return Some(r);
        }
        if turn.called_back() {
            return None;
        }
        let woke = {
            let mut wait = std::pin::pin!(conn.cq().wait_async(&mut wcs));
            // Holds `reaping` while the wait polls the CQ, and keeps it when the
            // wait returns completions, until they are handled.
            let reaped = std::future::poll_fn(|cx| {
                let reaping = &sig.reaping;
                if reaping
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    return Poll::Ready(None);
                }
                let r = wait.as_mut().poll(cx);
                if r.is_pending() {
                    reaping.store(false, Ordering::Release);
                }
                r.map(Some)
            });
            // `biased`: no random branch order (tokio's per-select RNG, a hundred
            // instructions a call). No branch starves: each round starts by looking
            // at the channel and at `aside` (`turn.reply`, `turn.called_back`).
            tokio::select! {
                biased;
                r = reaped => Some(r),
                () = sig.reaper.notified() => None,
                // The reply delivered by another reaper (the driver, or a caller that
                // started alone after this one was called back and took the CQ before
                // this one looked): its delivery wakes this task.
                r = &mut *rx => {
                    let r = turn.received(r);
                    missed();
                    return Some(r);
                }
            }
        };
        match woke {
            Some(Some(r)) => {
                // This task handles the batch: its own reply in it must not wake it
                // (a second poll of the whole task, for nothing). So the channel
                // forgets this task's waker first. Nothing is missed: a reply
                // delivered meanwhile (by this batch, or by the driver) is found by
                // the `try_recv` that starts the next round; one delivered after that
                // look, by the `select!`'s poll of the channel, which puts this
                // task's waker back for any later one. (With tokio's budget spent,
                // `unwatch` leaves the waker in place: one wake-up more, no loss.)
                let early = unwatch(rx);
                conn.handle_reaped(r, &wcs);
                sig.reaping.store(false, Ordering::Release);
                if let Some(r) = early {
                    let r = turn.received(r);
                    missed();
                    return Some(r);
                }
            }
            Some(None) => {
                // The driver still has the CQ.
                kick_once();
                yield_stealable().await;
            }
            None => {}
        }
    }
}

/// Takes this task's waker out of `rx` (a no-op waker in its place); the reply, if
/// it came already. A delivery into `rx` wakes nobody until it is polled again.
fn unwatch(rx: &mut ReplyReceiver) -> Option<RecvResult> {
    match Pin::new(rx).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}

/// What awaiting a [`ReplyReceiver`] gives.
type RecvResult = Result<Result<IncomingReply, Status>, oneshot::error::RecvError>;

/// A caller's turn at the CQ; unless finished with the caller's reply or called
/// back, dropping it (the caller went away) gives the CQ back to the driver.
struct Turn<'a, L: Link> {
    conn: &'a Conn<L>,
    done: bool,
}

impl<L: Link> Turn<'_, L> {
    /// The caller's reply, if it came (then the turn is over).
    fn reply(&mut self, rx: &mut ReplyReceiver) -> Option<Result<IncomingReply, Status>> {
        let r = match rx.try_recv() {
            Ok(r) => r,
            Err(TryRecvError::Closed) => Err(Status::unavailable("connection closed")),
            Err(TryRecvError::Empty) => return None,
        };
        self.finish();
        Some(r)
    }

    /// Whether the driver was called back (another call started): it reaps.
    fn called_back(&mut self) -> bool {
        self.done = !self.conn.sig.aside.load(Ordering::SeqCst);
        self.done
    }

    /// The caller's reply, received by awaiting its channel (then the turn is over).
    fn received(&mut self, r: RecvResult) -> Result<IncomingReply, Status> {
        self.finish();
        r.unwrap_or_else(|_| Err(Status::unavailable("connection closed")))
    }

    /// The caller has its reply: the driver stays aside only if no call is open
    /// (and nobody called it back meanwhile). A call open now started alone after
    /// this one's reply was handled, and its caller may be asleep on the CQ in the
    /// driver's place: [`Conn::driver_reaps`] wakes it too, else the driver would
    /// take its reply and nothing would wake it to look.
    fn finish(&mut self) {
        self.done = true;
        let sig = &self.conn.sig;
        if !sig.aside.load(Ordering::SeqCst) {
            sig.kick.notify_one();
        } else if self.conn.open_calls() > 0 {
            self.conn.driver_reaps();
        }
    }
}

impl<L: Link> Drop for Turn<'_, L> {
    fn drop(&mut self) {
        if !self.done {
            // The caller went away: the driver reaps again.
            self.conn.driver_reaps();
        }
    }
}
