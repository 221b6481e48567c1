//! tower's reserve-then-call for a channel: callers waiting in `poll_ready`.

use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use super::lock;
use crate::status::Status;

/// Tasks waiting in `poll_ready` for a credit and a send slot.
#[derive(Default)]
pub(crate) struct ReadyWaiters(Mutex<Vec<Waker>>);

impl ReadyWaiters {
    /// `try_reserve` now; if nothing is free, registers the caller and looks again, so
    /// that a credit returned between the first look and the registration still wakes
    /// it. Registering only when waiting keeps the list empty on the fast path.
    pub(crate) fn poll_reserve(
        &self,
        cx: &mut Context<'_>,
        mut try_reserve: impl FnMut() -> Option<Result<(), Status>>,
    ) -> Poll<Result<(), Status>> {
        if let Some(r) = try_reserve() {
            return Poll::Ready(r);
        }
        {
            let mut ready = lock(&self.0);
            if !ready.iter().any(|w| w.will_wake(cx.waker())) {
                ready.push(cx.waker().clone());
            }
        }
        match try_reserve() {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }

    /// Wakes every waiting caller (credits or slots came back, or the channel died).
    pub(crate) fn wake_all(&self) {
        let wakers = std::mem::take(&mut *lock(&self.0));
        for w in wakers {
            w.wake();
        }
    }
}
