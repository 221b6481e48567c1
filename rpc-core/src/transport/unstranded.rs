//! A task that serves others (a CQ's poller) which no blocked worker can strand.
//!
//! tokio puts a task woken on one of its worker threads in that worker's LIFO
//! slot, which no other worker steals (tokio-rs/tokio#4941). If that worker runs
//! another task first (the global queue gets its turn every few ticks) and that
//! task blocks its thread (encoding a large body, a handler computing on one), the
//! woken task waits for it, and every call it serves with it, while the other
//! workers idle: `tests/tests/large_fairness.rs` saw a server's poller, woken by an
//! I/O poll on the worker that then took a client's encoding of a 1 MiB request,
//! wait 20 s there.
//!
//! [`Unstranded`] wakes a decoy task right after the poller: the decoy takes the
//! LIFO slot and pushes the poller to that worker's run queue, where an idle worker
//! steals it (tokio wakes one when the slot overflows). Only the first wake of a
//! poller asleep pays for it; a wake while it runs needs nothing (tokio requeues a
//! task woken during its poll at the back of the run queue), nor one already woken.
//! The protection is gone only while the decoy itself waits to run, woken and not
//! yet polled (stranded in turn, say): then a second worker must block at the same
//! time for the poller to wait.
//!
//! Its price is paid per wake of a poller asleep: the decoy's poll, and the idle
//! worker tokio wakes to steal. Spinning pollers rarely sleep under load; in
//! `CompletionMode::Event`, where a server's poller sleeps between calls, it shows
//! in the instructions per call (`scripts/callgrind-per-call`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// The poller is being polled: a wake reschedules it from the back of the run queue.
const POLLING: u8 = 0;
/// The poller waits: the first wake moves it off the LIFO slot.
const ASLEEP: u8 = 1;
/// The poller was woken and not yet polled again.
const WOKEN: u8 = 2;

/// Runs `fut` as a task no blocked worker strands (the module's doc says how).
/// Spawns the decoy task: call it within a tokio runtime.
pub(crate) fn unstranded<F: Future>(fut: F) -> Unstranded<F> {
    let relay = Arc::new(Relay {
        state: AtomicU8::new(POLLING),
        task: AtomicWaker::new(),
        decoy: AtomicWaker::new(),
        done: AtomicBool::new(false),
    });
    tokio::spawn(decoy(relay.clone()));
    Unstranded {
        fut,
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
    /// The poller task's own waker.
    task: AtomicWaker,
    /// The decoy task's waker (absent while the decoy is woken and not yet polled).
    decoy: AtomicWaker,
    /// The poller is gone: the decoy ends.
    done: AtomicBool,
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self.state.swap(WOKEN, Ordering::AcqRel) {
            ASLEEP => {
                // The poller takes this worker's LIFO slot, then the decoy takes it
                // from the poller, which moves to the run queue.
                self.task.wake();
                self.decoy.wake();
            }
            POLLING => self.task.wake(),
            _ => {}
        }
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
