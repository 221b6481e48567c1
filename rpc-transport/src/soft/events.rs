//! The device's asynchronous event queue, readable through an eventfd.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::Mutex;

use crate::event::AsyncEvent;

use super::sys::EventFd;

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
