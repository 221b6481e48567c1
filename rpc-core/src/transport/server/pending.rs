//! Connections accepted whose hello has not arrived: bounded, oldest first out.
//!
//! A peer that connects and says nothing costs a task and a socket until the
//! handshake timeout. At most `max` such peers wait at once; one more evicts the
//! one that has waited longest. A legitimate client speaks at once, so a flood of
//! silent connections delays it by nothing, and the flood cannot grow without bound.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::transport::lock;

/// The handshakes in progress.
pub(crate) struct PendingHandshakes {
    max: usize,
    queue: Mutex<VecDeque<(u64, Arc<Notify>)>>,
    next: AtomicU64,
}

/// One handshake in progress; leaves the queue when dropped.
pub(crate) struct Pending {
    owner: Arc<PendingHandshakes>,
    id: u64,
    evict: Arc<Notify>,
}

impl PendingHandshakes {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(PendingHandshakes {
            max: max.max(1),
            queue: Mutex::new(VecDeque::new()),
            next: AtomicU64::new(0),
        })
    }

    /// Registers a new handshake, evicting the oldest if `max` are waiting.
    pub(crate) fn enter(self: &Arc<Self>) -> Pending {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evict = Arc::new(Notify::new());
        let mut q = lock(&self.queue);
        if q.len() >= self.max {
            if let Some((_, oldest)) = q.pop_front() {
                // Stored as a permit if the handshake is not waiting yet.
                oldest.notify_one();
            }
        }
        q.push_back((id, evict.clone()));
        Pending {
            owner: self.clone(),
            id,
            evict,
        }
    }
}

impl Pending {
    /// Completes when a newer connection evicted this one.
    pub(crate) async fn evicted(&self) {
        self.evict.notified().await;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        lock(&self.owner.queue).retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_of_too_many_is_evicted_and_leaving_frees_a_place() {
        let p = PendingHandshakes::new(2);
        let a = p.enter();
        let b = p.enter();
        drop(b);
        let c = p.enter(); // two waiting again: a and c
        let d = p.enter(); // evicts a
        a.evicted().await;
        let c_evicted = tokio::time::timeout(std::time::Duration::ZERO, c.evicted()).await;
        assert!(c_evicted.is_err(), "c was not evicted");
        assert_eq!(lock(&p.queue).len(), 2);
        drop((c, d));
        assert!(lock(&p.queue).is_empty());
    }
}
