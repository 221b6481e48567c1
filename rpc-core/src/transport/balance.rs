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

use prost::Message;
use tokio::sync::mpsc;
use tower::Service;

use super::channel::{Change, Channel};
use super::endpoint::Endpoint;
use super::lock;
use crate::client::{IncomingReply, IncomingStream, OutgoingCall, OutgoingStream};
use crate::server::BoxFuture;
use crate::status::Status;

/// One clone of a balanced channel.
pub(crate) struct Balanced {
    pool: Arc<Pool>,
    /// The endpoint's channel this clone reserved on (the reservation is in it), and
    /// that endpoint's load.
    reserved: Option<(Channel, Arc<AtomicUsize>)>,
    rng: u64,
}

/// What all clones share: the endpoints, and the changes still to apply.
struct Pool {
    state: Mutex<PoolState>,
}

struct PoolState {
    members: Vec<Member>,
    changes: Option<Box<dyn Changes>>,
}

#[derive(Clone)]
struct Member {
    id: u64,
    channel: Channel,
    /// Calls in flight through this balanced channel.
    load: Arc<AtomicUsize>,
}

impl Member {
    fn new(id: u64, endpoint: &Endpoint) -> Member {
        Member {
            id,
            channel: endpoint.connect_lazy(),
            load: Arc::default(),
        }
    }
}

/// The receiving end of `balance_channel`, with its key type erased.
trait Changes: Send {
    /// Applies every change sent so far; registers `cx` for the next one.
    fn poll_apply(&mut self, cx: &mut Context<'_>, members: &mut Vec<Member>);
}

struct ChangeReceiver<K> {
    rx: mpsc::Receiver<Change<K, Endpoint>>,
    ids: HashMap<K, u64>,
    next_id: u64,
}

impl<K: Hash + Eq + Send + Clone + 'static> Changes for ChangeReceiver<K> {
    fn poll_apply(&mut self, cx: &mut Context<'_>, members: &mut Vec<Member>) {
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

impl Balanced {
    /// Balances over a fixed list of endpoints.
    pub(crate) fn list(endpoints: impl Iterator<Item = Endpoint>) -> Balanced {
        let members = endpoints
            .enumerate()
            .map(|(i, e)| Member::new(i as u64, &e))
            .collect();
        Balanced::new(members, None)
    }

    /// Balances over the endpoints sent on the returned sender.
    pub(crate) fn channel<K>(capacity: usize) -> (Balanced, mpsc::Sender<Change<K, Endpoint>>)
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

    fn new(members: Vec<Member>, changes: Option<Box<dyn Changes>>) -> Balanced {
        Balanced {
            pool: Arc::new(Pool {
                state: Mutex::new(PoolState { members, changes }),
            }),
            reserved: None,
            rng: seed(),
        }
    }

    /// Reserves on one endpoint: the less loaded of two picked at random, else any
    /// ready one. `Pending` while none is ready but some may become so; `Err` when
    /// every endpoint failed to connect.
    pub(crate) fn poll_ready<M>(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>>
    where
        M: Message + Send + 'static,
    {
        self.poll_pick(cx, |channel, cx| channel.poll_ready_or_fail::<M>(cx))
    }

    /// [`Balanced::poll_ready`] for a streaming call: reserves what a stream needs
    /// on the endpoint picked.
    pub(crate) fn poll_ready_stream(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        self.poll_pick(cx, |channel, cx| {
            Service::<OutgoingStream>::poll_ready(channel, cx)
        })
    }

    /// Picks an endpoint and reserves on it with `ready`.
    fn poll_pick(
        &mut self,
        cx: &mut Context<'_>,
        ready: impl Fn(&mut Channel, &mut Context<'_>) -> Poll<Result<(), Status>>,
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

    /// Starts the call on the endpoint `poll_ready` reserved.
    pub(crate) fn call<M>(&mut self, call: OutgoingCall<M>) -> BoxFuture<IncomingReply>
    where
        M: Message + Send + 'static,
    {
        let Some((mut channel, load)) = self.reserved.take() else {
            return Box::pin(async { Err(Status::internal("Channel::call without poll_ready")) });
        };
        load.fetch_add(1, Ordering::Relaxed);
        let in_flight = InFlight(load);
        let reply = channel.call(call);
        Box::pin(async move {
            let _in_flight = in_flight;
            reply.await
        })
    }

    /// Opens the streaming call on the endpoint `poll_ready_stream` reserved. The
    /// endpoint's load counts the call until it is open (its messages then flow
    /// on that connection, whatever the balancer does).
    pub(crate) fn call_stream(&mut self, call: OutgoingStream) -> BoxFuture<IncomingStream> {
        let Some((mut channel, load)) = self.reserved.take() else {
            return Box::pin(async { Err(Status::internal("Channel::call without poll_ready")) });
        };
        load.fetch_add(1, Ordering::Relaxed);
        let in_flight = InFlight(load);
        let opened = Service::<OutgoingStream>::call(&mut channel, call);
        Box::pin(async move {
            let _in_flight = in_flight;
            opened.await
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

impl Clone for Balanced {
    fn clone(&self) -> Self {
        // A reservation belongs to the clone that made it.
        Balanced {
            pool: self.pool.clone(),
            reserved: None,
            rng: seed(),
        }
    }
}

impl std::fmt::Debug for Balanced {
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
