//! Client-side load balancing, as tonic's `Channel::balance_list` and
//! `Channel::balance_channel`: one channel per endpoint, and each call goes to the
//! less loaded of two endpoints picked at random among those ready (power of two
//! choices, what tower's `p2c::Balance` does).
//!
//! Load is the number of calls in flight through this balanced channel. An endpoint
//! whose connection is being dialed is passed over while another is ready; one
//! whose dial failed is passed over until its backoff ends and it is dialed again
//! (as a lone channel would). A call fails only when every endpoint failed to
//! connect (`UNAVAILABLE`, or it waits with wait-for-ready). With no endpoint at all,
//! `poll_ready` waits for one to be inserted, as tower's balancer.
//!
//! A balanced channel takes the pool's lock and allocates once per call (for its
//! load count); a lone channel pays nothing for this.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::mpsc;

use super::endpoint::Endpoint;
use super::lock;
use crate::server::BoxFuture;
use crate::status::Status;

/// A change in the set of endpoints of a `Channel::balance_channel`, as tonic's
/// `tonic::transport::channel::Change`.
#[derive(Debug, Clone)]
pub enum Change<K, V> {
    /// A new endpoint, identified by `K` (an endpoint inserted again under the same
    /// key replaces the first).
    Insert(K, V),
    /// The endpoint identified by `K` is gone: it gets no more calls.
    Remove(K),
}

/// What a balancer spreads calls over: one channel per endpoint. (`Channel` is the
/// only one; the balancer names it through this so that a channel can hold a
/// balancer of channels.)
pub(crate) trait Backend: Clone + Send + 'static {
    /// A channel to `endpoint` that dials on first need.
    fn lazy(endpoint: &Endpoint) -> Self;
    /// When this channel, whose dial failed, may dial again.
    fn retry_at(&self) -> Option<Instant>;
}

/// One clone of a balanced channel.
pub(crate) struct Balanced<C> {
    pool: Arc<Pool<C>>,
    /// The endpoint's channel this clone reserved on (the reservation is in it), and
    /// that endpoint's load.
    reserved: Option<(C, Arc<AtomicUsize>)>,
    rng: u64,
}

/// What all clones share: the endpoints, and the changes still to apply.
struct Pool<C> {
    state: Mutex<PoolState<C>>,
}

struct PoolState<C> {
    members: Vec<Member<C>>,
    changes: Option<Box<dyn Changes<C>>>,
}

#[derive(Clone)]
struct Member<C> {
    id: u64,
    channel: C,
    /// Calls in flight through this balanced channel.
    load: Arc<AtomicUsize>,
}

impl<C: Backend> Member<C> {
    fn new(id: u64, endpoint: &Endpoint) -> Member<C> {
        Member {
            id,
            channel: C::lazy(endpoint),
            load: Arc::default(),
        }
    }
}

/// The receiving end of `balance_channel`, with its key type erased.
trait Changes<C>: Send {
    /// Applies every change sent so far; registers `cx` for the next one.
    fn poll_apply(&mut self, cx: &mut Context<'_>, members: &mut Vec<Member<C>>);
}

struct ChangeReceiver<K> {
    rx: mpsc::Receiver<Change<K, Endpoint>>,
    ids: HashMap<K, u64>,
    next_id: u64,
}

impl<C: Backend, K: Hash + Eq + Send + Clone + 'static> Changes<C> for ChangeReceiver<K> {
    fn poll_apply(&mut self, cx: &mut Context<'_>, members: &mut Vec<Member<C>>) {
        while let Poll::Ready(Some(change)) = self.rx.poll_recv(cx) {
            match change {
                Change::Insert(key, endpoint) => {
                    // A key inserted again replaces its endpoint, as tower's balancer.
                    if let Some(old) = self.ids.remove(&key) {
                        members.retain(|m| m.id != old);
                    }
                    let id = self.next_id;
                    self.next_id += 1;
                    self.ids.insert(key, id);
                    members.push(Member::new(id, &endpoint));
                }
                Change::Remove(key) => {
                    if let Some(id) = self.ids.remove(&key) {
                        members.retain(|m| m.id != id);
                    }
                }
            }
        }
    }
}

impl<C: Backend> Balanced<C> {
    /// Balances over a fixed list of endpoints.
    pub(crate) fn list(endpoints: impl Iterator<Item = Endpoint>) -> Balanced<C> {
        let members = endpoints
            .enumerate()
            .map(|(i, e)| Member::new(i as u64, &e))
            .collect();
        Balanced::new(members, None)
    }

    /// Balances over the endpoints sent on the returned sender.
    pub(crate) fn channel<K>(capacity: usize) -> (Balanced<C>, mpsc::Sender<Change<K, Endpoint>>)
    where
        K: Hash + Eq + Send + Clone + 'static,
    {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let changes = ChangeReceiver {
            rx,
            ids: HashMap::new(),
            next_id: 0,
        };
        (Balanced::new(Vec::new(), Some(Box::new(changes))), tx)
    }

    fn new(members: Vec<Member<C>>, changes: Option<Box<dyn Changes<C>>>) -> Balanced<C> {
        Balanced {
            pool: Arc::new(Pool {
                state: Mutex::new(PoolState { members, changes }),
            }),
            reserved: None,
            rng: seed(),
        }
    }

    /// Reserves on one endpoint with `ready`: the less loaded of two picked at
    /// random, else any ready one. `Pending` while none is ready but some may become
    /// so; `Err` when every endpoint failed to connect.
    pub(crate) fn poll_pick(
        &mut self,
        cx: &mut Context<'_>,
        ready: impl Fn(&mut C, &mut Context<'_>) -> Poll<Result<(), Status>>,
    ) -> Poll<Result<(), Status>> {
        if self.reserved.is_some() {
            return Poll::Ready(Ok(()));
        }
        let mut guard = lock(&self.pool.state);
        let state = &mut *guard;
        if let Some(changes) = &mut state.changes {
            changes.poll_apply(cx, &mut state.members);
        }
        let members = &state.members;
        let n = members.len();
        if n == 0 {
            // Woken by the next change, if any can come.
            return Poll::Pending;
        }
        let a = next_index(&mut self.rng, n);
        let b = (a + 1 + next_index(&mut self.rng, n.max(2) - 1)) % n;
        let load = |i: usize| members[i].load.load(Ordering::Relaxed);
        let (first, second) = if load(b) < load(a) { (b, a) } else { (a, b) };
        let rest = (0..n).filter(|&i| i != first && i != second);
        let order = [first, second].into_iter().take(n.min(2)).chain(rest);
        let mut failed = None;
        let mut pending = false;
        for i in order {
            let mut channel = members[i].channel.clone();
            match ready(&mut channel, cx) {
                Poll::Ready(Ok(())) => {
                    self.reserved = Some((channel, members[i].load.clone()));
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Err(s)) => {
                    failed.get_or_insert(s);
                }
                Poll::Pending => pending = true,
            }
        }
        match failed {
            Some(s) if !pending => Poll::Ready(Err(Status::unavailable(format!(
                "no endpoint of the balanced channel can connect; one said: {}",
                s.message()
            )))),
            _ => Poll::Pending,
        }
    }

    /// Starts a call with `start` on the endpoint `poll_pick` reserved. The
    /// endpoint's load counts the call until the returned future ends.
    pub(crate) fn start<T: Send + 'static>(
        &mut self,
        start: impl FnOnce(&mut C) -> BoxFuture<T>,
    ) -> BoxFuture<T> {
        let Some((mut channel, load)) = self.reserved.take() else {
            return Box::pin(async { Err(Status::internal("Channel::call without poll_ready")) });
        };
        load.fetch_add(1, Ordering::Relaxed);
        let in_flight = InFlight(load);
        let started = start(&mut channel);
        Box::pin(async move {
            let _in_flight = in_flight;
            started.await
        })
    }

    /// When the first endpoint whose dial failed may be dialed again.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        lock(&self.pool.state)
            .members
            .iter()
            .filter_map(|m| m.channel.retry_at())
            .min()
    }
}

impl<C> Clone for Balanced<C> {
    fn clone(&self) -> Self {
        // A reservation belongs to the clone that made it.
        Balanced {
            pool: self.pool.clone(),
            reserved: None,
            rng: seed(),
        }
    }
}

impl<C> std::fmt::Debug for Balanced<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("endpoints", &lock(&self.pool.state).members.len())
            .field("reserved", &self.reserved.is_some())
            .finish()
    }
}

/// Counts a call in its endpoint's load until it ends.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// xorshift64: a uniform-enough pick in `0..n`, with no dependency for it.
fn next_index(rng: &mut u64, n: usize) -> usize {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    (*rng % n as u64) as usize
}

/// A distinct nonzero seed per balanced channel clone.
fn seed() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = NEXT.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    (time ^ n) | 1
}
