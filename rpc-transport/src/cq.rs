//! Completion queues: polled in batches, busy or under tokio.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::unix::AsyncFd;

use crate::dispatch::dispatch;
use crate::error::{Error, Result};
use crate::event::ObjectId;
use crate::soft;
use crate::wc::WorkCompletion;

#[derive(Clone)]
pub(crate) enum CqImp {
    Soft(Arc<soft::Cq>),
    #[cfg(feature = "rdma")]
    Verbs(Arc<crate::verbs::Cq>),
}

impl From<Arc<soft::Cq>> for CqImp {
    fn from(c: Arc<soft::Cq>) -> Self {
        CqImp::Soft(c)
    }
}

#[cfg(feature = "rdma")]
impl From<Arc<crate::verbs::Cq>> for CqImp {
    fn from(c: Arc<crate::verbs::Cq>) -> Self {
        CqImp::Verbs(c)
    }
}

/// A file descriptor owned elsewhere, registered with tokio's reactor.
pub(crate) struct RawFdRef(pub(crate) RawFd);

impl AsRawFd for RawFdRef {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Registers `fd` with the current tokio reactor for readability.
///
/// # Safety
/// `fd` must stay open, and name the same file description, until the returned
/// `AsyncFd` is dropped.
pub(crate) unsafe fn register_readable(fd: RawFd) -> std::io::Result<AsyncFd<RawFdRef>> {
    // SAFETY: forwarded contract.
    unsafe { AsyncFd::register_with_interest(RawFdRef(fd), tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)
}

/// A completion queue (`ibv_cq` with its completion channel).
///
/// Two ways to wait: [`CompletionQueue::poll`] in a loop (busy polling, lowest
/// latency; on the soft provider each poll also makes progress on the QPs that use
/// this CQ), or [`CompletionQueue::poll_async`] under tokio, which arms the CQ and
/// sleeps on its event descriptor when it is empty.
pub struct CompletionQueue {
    // Deregisters from the reactor before the provider closes the descriptor.
    async_fd: OnceLock<AsyncFd<RawFdRef>>,
    async_fd_init: Mutex<()>,
    /// Armed, polled empty after arming, and no event consumed since: a wait that
    /// was interrupted there (its future dropped, e.g. by a `select!`) can sleep
    /// again without arming and polling anew, since anything completing meanwhile
    /// raises the event.
    armed_empty: AtomicBool,
    pub(crate) imp: CqImp,
}

impl CompletionQueue {
    pub(crate) fn new(imp: CqImp) -> Self {
        CompletionQueue {
            async_fd: OnceLock::new(),
            async_fd_init: Mutex::new(()),
            armed_empty: AtomicBool::new(false),
            imp,
        }
    }

    /// Moves up to `wc.len()` completions into `wc`; returns how many. An overrun CQ
    /// returns [`Error::CqOverrun`].
    #[inline]
    pub fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        dispatch!(&self.imp, CqImp, c => c.poll(wc))
    }

    /// Requests an event on the next completion (`solicited_only`: only for solicited
    /// or error completions).
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        dispatch!(&self.imp, CqImp, c => c.req_notify(solicited_only))
    }

    /// The descriptor that becomes readable when an armed CQ gets a completion.
    pub fn event_fd(&self) -> RawFd {
        dispatch!(&self.imp, CqImp, c => c.event_fd())
    }

    /// Acknowledges pending events on the descriptor (`ibv_get_cq_event` +
    /// `ibv_ack_cq_events`), so that it can signal again.
    pub fn consume_events(&self) {
        dispatch!(&self.imp, CqImp, c => c.consume_events())
    }

    /// Number of completions it can hold.
    pub fn capacity(&self) -> u32 {
        dispatch!(&self.imp, CqImp, c => c.capacity())
    }

    /// Identity used in [`crate::AsyncEvent::CqErr`].
    pub fn id(&self) -> ObjectId {
        ObjectId(dispatch!(&self.imp, CqImp, c => c.id()))
    }

    /// Polls; when the CQ is empty, arms it and waits under tokio for the next
    /// completion. Returns at least one completion (or an error).
    pub async fn poll_async(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let n = self.poll(wc)?;
        if n > 0 {
            return Ok(n);
        }
        self.wait_async(wc).await
    }

    /// [`CompletionQueue::poll_async`] for a caller that has just polled the CQ empty
    /// (its last batch was shorter than its buffer): arms first, so the only poll
    /// before sleeping is the one that catches a completion racing with the arming.
    /// Each poll costs the soft provider a read per connection, and verbs a lock, so
    /// an event-driven driver saves one futile poll per wake-up.
    pub async fn wait_async(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        loop {
            if !self.armed_empty.swap(false, Ordering::AcqRel) {
                self.req_notify(false)?;
                let n = self.poll(wc)?;
                if n > 0 {
                    return Ok(n);
                }
            }
            let afd = self.async_fd()?;
            self.armed_empty.store(true, Ordering::Release);
            let mut guard = afd
                .readable()
                .await
                .map_err(|e| Error::verb("ibv_get_cq_event", e))?;
            self.armed_empty.store(false, Ordering::Release);
            // Clear tokio's readiness now, not only when woken for nothing: left set, the
            // next wait would return at once and poll twice in vain. Nothing is lost: an
            // event after this point sets readiness anew (tokio compares ticks), and
            // every wait polls after arming before it sleeps.
            guard.clear_ready();
            self.consume_events();
            let n = self.poll(wc)?;
            if n > 0 {
                return Ok(n);
            }
        }
    }

    fn async_fd(&self) -> Result<&AsyncFd<RawFdRef>> {
        if let Some(a) = self.async_fd.get() {
            return Ok(a);
        }
        // Registering one descriptor twice with the reactor fails, so initialise once.
        let _init = self.async_fd_init.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = self.async_fd.get() {
            return Ok(a);
        }
        // SAFETY: the descriptor belongs to `self.imp`, which this CQ owns and which is
        // dropped after `async_fd` (field order), so it stays open for the registration.
        let afd = unsafe { register_readable(self.event_fd()) }
            .map_err(|e| Error::verb("ibv_create_comp_channel", e))?;
        Ok(self.async_fd.get_or_init(|| afd))
    }
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("capacity", &self.capacity())
            .finish()
    }
}
