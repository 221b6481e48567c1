//! The device's asynchronous event queue, readable through an eventfd.
//!
//! Bounded: an application that never reads its events (rpc-core reads none) would
//! otherwise keep one for every connection that ever closed (a QP enters ERR and
//! raises `QpFatal` or `QpLastWqeReached`): a leak without end on a long-lived
//! server. Past [`MAX_PENDING`] the oldest is dropped, as a reader that fell that
//! far behind has lost track of them anyway.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::Mutex;

use crate::event::AsyncEvent;

use super::sys::EventFd;

/// Events kept unread at most.
pub(crate) const MAX_PENDING: usize = 1024;

/// Pending async events; the eventfd is readable exactly while the queue is non-empty
/// (both change under the one lock).
pub(crate) struct EventQueue {
    q: Mutex<VecDeque<AsyncEvent>>,
    fd: EventFd,
}

impl EventQueue {
    pub(crate) fn new() -> std::io::Result<EventQueue> {
        Ok(EventQueue {
            q: Mutex::new(VecDeque::new()),
            fd: EventFd::new()?,
        })
    }

    pub(crate) fn push(&self, ev: AsyncEvent) {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() == MAX_PENDING {
            q.pop_front();
        }
        q.push_back(ev);
        self.fd.signal();
    }

    pub(crate) fn pop(&self) -> Option<AsyncEvent> {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let ev = q.pop_front();
        if q.is_empty() {
            self.fd.drain();
        }
        ev
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd.raw()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unread_events_are_bounded_and_the_newest_kept() {
        let q = EventQueue::new().unwrap();
        let n = MAX_PENDING as u32 + 500;
        for qpn in 0..n {
            q.push(AsyncEvent::QpFatal(qpn));
        }
        let mut read = Vec::new();
        while let Some(AsyncEvent::QpFatal(qpn)) = q.pop() {
            read.push(qpn);
        }
        assert_eq!(read, (n - MAX_PENDING as u32..n).collect::<Vec<_>>());
        assert_eq!(q.pop(), None);
    }
}
