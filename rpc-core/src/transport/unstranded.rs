//! A task that serves others (a CQ's poller) which no blocked worker can strand.
//!
//! tokio puts a task woken on one of its worker threads in that worker's LIFO
//! slot, which no other worker steals (tokio-rs/tokio#4941). If that worker runs
//! another task first and that task blocks its thread (encoding a large body, a
//! handler computing on one), the woken task waits for it, and every call it
//! serves with it, while the other workers idle: `tests/tests/large_fairness.rs`
//! saw a server's poller, woken by an I/O poll on the worker that then took a
//! client's encoding of a 1 MiB request, wait 20 s there.
//!
//! [`Unstranded`] can wake a decoy task right after the poller: the decoy takes the
//! LIFO slot and pushes the poller to that worker's run queue, where an idle worker
//! steals it (tokio wakes one when a worker holds more than one task). That costs
//! the decoy's poll and the idle worker's wake-up, so the decoy is woken only where
//! the worker can run another task before the poller (tokio 1.54's
//! `multi_thread/worker.rs`). Which case a wake is, its waker says:
//!
//! * The poller's own waker, for whatever it waits on (a `Notify` a caller kicks):
//!   the waking task goes on running first, and may block. Decoy, always.
//! * Its [`DriverWaker`], for waits on the runtime's I/O driver only (the CQ's
//!   file descriptor): a worker polls that driver while it parks (or in its
//!   maintenance), outside any task, and picks its next task right after. That
//!   pick takes the LIFO slot first, except on a tick that reads the global queue
//!   first; so another task runs first only if the global queue holds one. Decoy
//!   if it does (`RuntimeMetrics::global_queue_depth`), else none. (A thread
//!   outside the runtime puts no task in a LIFO slot: nothing to guard there.)
//!
//! `tokio::task::try_id` cannot tell the two apart: a worker thread runs inside a
//! blocking-pool task, so it names a task even while the worker parks.
//!
//! A wake while the poller runs needs nothing (tokio requeues a task woken during
//! its poll at the back of the run queue), nor one already woken with its decoy.
//!
//! Why the hang cannot come back in the driver's case without a decoy: the worker
//! that woke the poller runs it next unless its next pick reads a non-empty global
//! queue, which was empty when it woke the poller. A task pushed there in the
//! instant between (from outside the workers) may still run first: if it wakes
//! the poller before it blocks (a caller kicking its connection's driver, as
//! `large_fairness.rs` does right after a reply), that wake finds the poller woken
//! bare and wakes the decoy then. What remains unguarded, and must coincide for the
//! poller to wait: that push in that instant, the pick being a global-queue tick,
//! and the task blocking its thread without waking the poller. Or the decoy itself
//! waiting to run, woken and not yet polled (stranded in turn): then a second
//! worker must block at the same time.
//!
//! In `CompletionMode::Event`, where a server's poller sleeps between calls and the
//! I/O driver wakes it for each request, the global queue is empty: no decoy, no
//! second worker woken, per call.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;
use tokio::runtime::RuntimeMetrics;

/// The poller is being polled: a wake reschedules it from the back of the run queue.
const POLLING: u8 = 0;
/// The poller waits: the first wake moves it off the LIFO slot.
const ASLEEP: u8 = 1;
/// The poller was woken and not yet polled again, the decoy with it if needed.
const WOKEN: u8 = 2;
/// The poller was woken by the driver without its decoy (the global queue was
/// empty) and not yet polled again: maybe still in a LIFO slot, where a later
/// wake from a task (one that may block) still has the decoy move it.
const WOKEN_BARE: u8 = 3;

/// Runs the future `make` builds as a task no blocked worker strands (the
/// module's doc says how); `make` gets the waker its waits on the I/O driver take.
/// Spawns the decoy task: call it within a tokio runtime.
pub(crate) fn unstranded<F: Future>(make: impl FnOnce(DriverWaker) -> F) -> Unstranded<F> {
    let relay = Arc::new(Relay {
        state: AtomicU8::new(POLLING),
        runtime: tokio::runtime::Handle::current().metrics(),
        task: AtomicWaker::new(),
        decoy: AtomicWaker::new(),
        done: AtomicBool::new(false),
    });
    tokio::spawn(decoy(relay.clone()));
    let driver = DriverWaker(Waker::from(Arc::new(FromDriver(relay.clone()))));
    Unstranded {
        fut: make(driver),
        waker: Waker::from(relay.clone()),
        relay,
    }
}

pin_project_lite::pin_project! {
    /// A future whose task no blocked worker strands ([`unstranded`]).
    pub(crate) struct Unstranded<F> {
        #[pin]
        fut: F,
        relay: Arc<Relay>,
        // One waker for every poll: what `fut` registers compares equal
        // (`will_wake`) from one poll to the next, so nothing is cloned anew.
        waker: Waker,
    }

    impl<F> PinnedDrop for Unstranded<F> {
        fn drop(this: Pin<&mut Self>) {
            this.relay.done.store(true, Ordering::Release);
            this.relay.decoy.wake();
        }
    }
}

impl<F: Future> Future for Unstranded<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let relay = &**this.relay;
        relay.task.register(cx.waker());
        relay.state.store(POLLING, Ordering::Release);
        let r = this.fut.poll(&mut Context::from_waker(this.waker));
        if r.is_pending() {
            // Unless woken meanwhile (then it is requeued already).
            let _ =
                relay
                    .state
                    .compare_exchange(POLLING, ASLEEP, Ordering::AcqRel, Ordering::Relaxed);
        }
        r
    }
}

/// What the poller's wakers share with its decoy.
struct Relay {
    state: AtomicU8,
    /// The poller's runtime: how many tasks its global queue holds.
    runtime: RuntimeMetrics,
    /// The poller task's own waker.
    task: AtomicWaker,
    /// The decoy task's waker (absent while the decoy is woken and not yet polled).
    decoy: AtomicWaker,
    /// The poller is gone: the decoy ends.
    done: AtomicBool,
}

impl Relay {
    /// Wakes the poller. Where it was asleep, the decoy takes the LIFO slot from
    /// it (which moves it to the run queue) unless `bare` (no other task can run
    /// first); where it was woken bare, the decoy does so now unless `bare` again.
    fn wake_poller(&self, bare: bool) {
        let mut was = self.state.load(Ordering::Acquire);
        loop {
            let now = match (was, bare) {
                (WOKEN, _) | (WOKEN_BARE, true) => return,
                (ASLEEP, true) => WOKEN_BARE,
                _ => WOKEN,
            };
            match self
                .state
                .compare_exchange(was, now, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(s) => was = s,
            }
        }
        match was {
            ASLEEP => {
                self.task.wake();
                if !bare {
                    self.decoy.wake();
                }
            }
            POLLING => self.task.wake(),
            _ => self.decoy.wake(),
        }
    }
}

/// A wake from anywhere: the waker may be a task that goes on running, and blocks.
impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wake_poller(false);
    }
}

/// The waker of a poller's waits on the runtime's I/O driver (and on nothing
/// else): see the module's doc for why its wakes need a decoy only while the
/// global queue holds a task.
#[derive(Clone)]
pub(crate) struct DriverWaker(Waker);

/// Polls `fut` with `driver`'s waker instead of the task's own, if given.
pub(crate) fn on_driver<F: Future>(driver: Option<&DriverWaker>, fut: F) -> OnDriver<'_, F> {
    OnDriver {
        fut,
        waker: driver.map(|d| &d.0),
    }
}

pin_project_lite::pin_project! {
    /// A wait on the I/O driver ([`on_driver`]).
    pub(crate) struct OnDriver<'a, F> {
        #[pin]
        fut: F,
        waker: Option<&'a Waker>,
    }
}

impl<F: Future> Future for OnDriver<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        match this.waker {
            Some(w) => this.fut.poll(&mut Context::from_waker(w)),
            None => this.fut.poll(cx),
        }
    }
}

/// [`DriverWaker`]'s wake: from the I/O driver, between a worker's tasks.
struct FromDriver(Arc<Relay>);

impl Wake for FromDriver {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let relay = &self.0;
        relay.wake_poller(relay.runtime.global_queue_depth() == 0);
    }
}

/// The decoy: does nothing when woken but take the LIFO slot, until the poller ends.
async fn decoy(relay: Arc<Relay>) {
    std::future::poll_fn(|cx| {
        relay.decoy.register(cx.waker());
        if relay.done.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}
