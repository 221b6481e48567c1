//! [`Handle`]: what all clones of a channel share: the endpoint, the connection of
//! the moment, and the dialing that replaces it when it breaks (tonic's reconnecting
//! `Channel`).
//!
//! A channel dials on its first call (or at once with `Endpoint::connect`), and again
//! on the first call after its connection died, one dial at a time: callers meanwhile
//! wait for it. A failed dial fails those callers `UNAVAILABLE` and starts gRPC's
//! connection backoff: until it ends, calls fail fast with the same status, and the
//! first call after it dials again.

use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::backoff::{Backoff, BackoffConfig};
use super::conn::Conn;
use super::conn::Dial;
use crate::status::Status;
use crate::transport::endpoint::Endpoint;
use crate::transport::lock;

/// Where a channel's connection stands.
enum Current<L: Dial> {
    /// Not dialed yet, or the last connection died: the next call dials.
    Idle,
    /// A dial is under way.
    Dialing,
    Up(Arc<Conn<L>>),
    /// The last dial failed: calls fail with `error` until `retry_at`.
    Down {
        retry_at: Instant,
        error: Status,
    },
}

struct State<L: Dial> {
    current: Current<L>,
    backoff: Backoff,
    /// Callers waiting for the dial under way.
    waiting: Vec<Waker>,
}

/// Shared by all clones of a channel (and its calls in flight); closes the
/// connection when the last goes.
pub(crate) struct Handle<L: Dial> {
    endpoint: Arc<Endpoint>,
    state: Mutex<State<L>>,
}

impl<L: Dial> Handle<L> {
    /// A handle that has not dialed yet.
    pub(crate) fn lazy(endpoint: Endpoint) -> Arc<Self> {
        Arc::new(Handle {
            endpoint: Arc::new(endpoint),
            state: Mutex::new(State {
                current: Current::Idle,
                backoff: Backoff::new(BackoffConfig::default()),
                waiting: Vec::new(),
            }),
        })
    }

    /// The connection of the moment, if one is up (no dialing).
    pub(crate) fn current(&self) -> Option<Arc<Conn<L>>> {
        match &lock(&self.state).current {
            Current::Up(c) => Some(c.clone()),
            _ => None,
        }
    }

    /// When the next dial may start, while the last one failed (wait-for-ready
    /// calls wait until then); `None` otherwise.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        match &lock(&self.state).current {
            Current::Down { retry_at, .. } => Some(*retry_at),
            _ => None,
        }
    }

    /// A usable connection: the current one, or the one a dial (started here if none
    /// is under way and the backoff allows) brings. `Err` while dials fail.
    pub(crate) fn poll_conn(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Arc<Conn<L>>, Status>> {
        let mut st = lock(&self.state);
        loop {
            match &st.current {
                Current::Up(c) if c.usable() => return Poll::Ready(Ok(c.clone())),
                Current::Up(c) => {
                    // Draining (GOAWAY): its calls in flight finish there, and the
                    // server closes it after them. Dead (the server went, or the
                    // transport failed): close it. Either way, dial a new one.
                    if !c.draining() {
                        tracing::debug!(peer = %self.peer(), "connection lost; reconnecting");
                        c.close();
                    }
                    st.current = Current::Idle;
                }
                Current::Down { retry_at, error } if Instant::now() < *retry_at => {
                    return Poll::Ready(Err(error.clone()));
                }
                Current::Down { .. } | Current::Idle => {
                    st.current = Current::Dialing;
                    self.spawn_dial();
                }
                Current::Dialing => {
                    if !st.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                        st.waiting.push(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn peer(&self) -> String {
        format!("{}:{}", self.endpoint.host, self.endpoint.port)
    }

    /// Dials on a task of its own (callers only wait for it), holding the handle
    /// weakly: a channel dropped meanwhile closes what the dial brings.
    fn spawn_dial(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        let endpoint = self.endpoint.clone();
        tokio::spawn(async move {
            let t = endpoint.settings.connect_timeout;
            let r = match tokio::time::timeout(t, L::connect(&endpoint)).await {
                Ok(r) => r.map_err(|e| e.detailed()),
                Err(_) => Err(format!("timed out after {t:?}")),
            };
            let Some(h) = weak.upgrade() else {
                if let Ok(conn) = r {
                    conn.close();
                }
                return;
            };
            let mut st = lock(&h.state);
            st.current = match r {
                Ok(conn) => {
                    st.backoff.reset();
                    Current::Up(conn)
                }
                Err(e) => {
                    let wait = st.backoff.failed();
                    tracing::debug!(peer = %h.peer(), error = %e, ?wait, "connect failed");
                    Current::Down {
                        retry_at: Instant::now() + wait,
                        error: Status::unavailable(format!("cannot connect to {}: {e}", h.peer())),
                    }
                }
            };
            let waiting = std::mem::take(&mut st.waiting);
            drop(st);
            waiting.into_iter().for_each(Waker::wake);
        });
    }
}

impl<L: Dial> Drop for Handle<L> {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Current::Up(c) = &st.current {
            c.close();
        }
    }
}
