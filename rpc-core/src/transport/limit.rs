//! tonic's `Endpoint::concurrency_limit` and `Endpoint::rate_limit`: a channel's
//! `poll_ready` waits (never fails) until the endpoint's limits let one more call go.
//!
//! The state is shared by every clone of the channel built from the endpoint, as
//! tonic's (where the limits sit behind the channel's shared buffer). A channel with
//! no limit has no `Limits` at all: the unlimited path pays one branch.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::endpoint::Settings;
use super::lock;
use super::ready::ReadyWaiters;

/// The limits of one channel clone: the shared state, and what this clone holds.
#[derive(Debug)]
pub(crate) struct Limits {
    concurrency: Option<Concurrency>,
    rate: Option<Rate>,
}

impl Limits {
    /// The limits `settings` ask for; `None` when there are none.
    pub(crate) fn of(settings: &Settings) -> Option<Box<Limits>> {
        if settings.concurrency_limit.is_none() && settings.rate_limit.is_none() {
            return None;
        }
        Some(Box::new(Limits {
            concurrency: settings.concurrency_limit.map(|n| Concurrency {
                permits: Arc::new(Permits {
                    available: AtomicUsize::new(n),
                    waiters: ReadyWaiters::default(),
                }),
                held: None,
            }),
            rate: settings.rate_limit.map(|(limit, per)| Rate {
                window: Arc::new(Mutex::new(Window {
                    ends: Instant::now(),
                    left: 0,
                })),
                limit,
                per,
                reserved: false,
                sleep: None,
            }),
        }))
    }

    /// Ready once this clone holds a concurrency permit and a rate token.
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(c) = &mut self.concurrency {
            if c.held.is_none() {
                let permits = &c.permits;
                match permits
                    .waiters
                    .poll_reserve(cx, || permits.try_take().then_some(Ok(())))
                {
                    Poll::Ready(_) => c.held = Some(Permit(permits.clone())),
                    Poll::Pending => return Poll::Pending,
                }
            }
        }
        if let Some(r) = &mut self.rate {
            return r.poll_ready(cx);
        }
        Poll::Ready(())
    }

    /// The call goes: its rate token is spent, and its permit (if any) is returned
    /// for the call to hold until it ends.
    pub(crate) fn start_call(&mut self) -> Option<Permit> {
        if let Some(r) = &mut self.rate {
            r.reserved = false;
        }
        self.concurrency.as_mut().and_then(|c| c.held.take())
    }
}

impl Clone for Limits {
    /// Shares the limits; what this clone holds stays with it.
    fn clone(&self) -> Self {
        Limits {
            concurrency: self.concurrency.as_ref().map(|c| Concurrency {
                permits: c.permits.clone(),
                held: None,
            }),
            rate: self.rate.as_ref().map(|r| Rate {
                window: r.window.clone(),
                limit: r.limit,
                per: r.per,
                reserved: false,
                sleep: None,
            }),
        }
    }
}

#[derive(Debug)]
struct Concurrency {
    permits: Arc<Permits>,
    /// Taken in `poll_ready`, moved into the call by `start_call`.
    held: Option<Permit>,
}

/// Calls that may still start: a counting semaphore whose waiters are woken together
/// when a permit comes back (each looks again; a woken caller that went away cannot
/// strand the others).
struct Permits {
    available: AtomicUsize,
    waiters: ReadyWaiters,
}

impl std::fmt::Debug for Permits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permits")
            .field("available", &self.available.load(Ordering::Relaxed))
            .finish()
    }
}

impl Permits {
    fn try_take(&self) -> bool {
        self.available
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// One call's place under the concurrency limit, given back when dropped (the call
/// ended, or the reservation was dropped unused).
#[derive(Debug)]
pub(crate) struct Permit(Arc<Permits>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.available.fetch_add(1, Ordering::AcqRel);
        self.0.waiters.wake_all();
    }
}

/// At most `limit` calls start per window of `per`, as tower's `RateLimit`, with the
/// window shared by the channel's clones.
#[derive(Debug)]
struct Rate {
    window: Arc<Mutex<Window>>,
    limit: u64,
    per: Duration,
    /// This clone took a token that its next call spends.
    reserved: bool,
    /// Armed while the window is used up: wakes the caller when it ends.
    sleep: Option<Pin<Box<Sleep>>>,
}

#[derive(Debug)]
struct Window {
    ends: Instant,
    left: u64,
}

impl Rate {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.reserved {
                return Poll::Ready(());
            }
            let ends = {
                let mut w = lock(&self.window);
                let now = Instant::now();
                if now >= w.ends {
                    w.ends = now + self.per;
                    w.left = self.limit;
                }
                if w.left > 0 {
                    w.left -= 1;
                    self.reserved = true;
                    self.sleep = None;
                    continue;
                }
                w.ends
            };
            let sleep = match &mut self.sleep {
                Some(s) => {
                    s.as_mut().reset(ends);
                    s
                }
                None => self.sleep.insert(Box::pin(tokio::time::sleep_until(ends))),
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::task::noop_waker_ref;

    fn settings(concurrency: Option<usize>, rate: Option<(u64, Duration)>) -> Settings {
        Settings {
            concurrency_limit: concurrency,
            rate_limit: rate,
            ..Settings::default()
        }
    }

    #[test]
    fn no_limits_means_nothing_to_check() {
        assert!(Limits::of(&Settings::default()).is_none());
    }

    #[test]
    fn the_concurrency_limit_is_shared_by_clones_and_freed_when_a_call_ends() {
        let mut a = Limits::of(&settings(Some(1), None)).unwrap();
        let mut b = a.clone();
        let mut cx = Context::from_waker(noop_waker_ref());
        assert!(a.poll_ready(&mut cx).is_ready());
        assert!(b.poll_ready(&mut cx).is_pending(), "the one permit is a's");
        let permit = a.start_call().expect("a permit for the call");
        assert!(
            b.poll_ready(&mut cx).is_pending(),
            "the call still holds it"
        );
        drop(permit);
        assert!(b.poll_ready(&mut cx).is_ready());
        // A reservation dropped unused gives its permit back too.
        drop(b);
        assert!(a.poll_ready(&mut cx).is_ready());
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_lets_limit_calls_per_window_across_clones() {
        let mut a = Limits::of(&settings(None, Some((2, Duration::from_secs(1))))).unwrap();
        let mut b = a.clone();
        let mut cx = Context::from_waker(noop_waker_ref());
        for l in [&mut a, &mut b] {
            assert!(l.poll_ready(&mut cx).is_ready());
            assert!(l.start_call().is_none());
        }
        assert!(a.poll_ready(&mut cx).is_pending(), "two per second");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(a.poll_ready(&mut cx).is_ready(), "a new window");
    }
}
