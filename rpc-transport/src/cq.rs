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
    /// Armed before its last poll, which emptied it, and no event consumed since:
    /// anything completing from then on raises the event, so a wait can sleep without
    /// arming and polling anew (after a short batch, or after a wait interrupted by a
    /// `select!`).
    armed_reaped: AtomicBool,
    pub(crate) imp: CqImp,
}

impl CompletionQueue {
    pub(crate) fn new(imp: CqImp) -> Self {
        CompletionQueue {
            async_fd: OnceLock::new(),
            async_fd_init: Mutex::new(()),
            armed_reaped: AtomicBool::new(false),
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
    /// (its last batch was shorter than its buffer). The CQ is armed before every poll
    /// that may precede a sleep, so a completion after the arm raises the event: when
    /// such a poll leaves the CQ empty, the next wait sleeps at once instead of arming
    /// and polling again. Each poll costs the soft provider a read per connection, and
    /// verbs a lock, so an event-driven driver polls once per wake-up.
    pub async fn wait_async(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        loop {
            if !self.armed_reaped.swap(false, Ordering::AcqRel) {
                if let Some(n) = self.arm_and_poll(wc)? {
                    return Ok(n);
                }
            } else {
                // The caller may have polled since (spinning before it sleeps), which
                // withdrew the soft provider's requests for doorbells: renew them, and
                // poll instead if input arrived meanwhile.
                let input = match &self.imp {
                    CqImp::Soft(c) => c.prepare_sleep(),
                    #[cfg(feature = "rdma")]
                    CqImp::Verbs(_) => false,
                };
                if input {
                    if let Some(n) = self.arm_and_poll(wc)? {
                        return Ok(n);
                    }
                }
            }
            let afd = self.async_fd()?;
            self.armed_reaped.store(true, Ordering::Release);
            let mut guard = afd
                .readable()
                .await
                .map_err(|e| Error::verb("ibv_get_cq_event", e))?;
            self.armed_reaped.store(false, Ordering::Release);
            // Clear tokio's readiness now, not only when woken for nothing: left set, the
            // next wait would return at once and poll in vain. Nothing is lost: an event
            // after this point sets readiness anew (tokio compares ticks), and the poll
            // below follows a fresh arm.
            guard.clear_ready();
            self.consume_events();
            if let Some(n) = self.arm_and_poll(wc)? {
                return Ok(n);
            }
        }
    }

    /// Arms the CQ, then polls. A batch shorter than `wc` emptied it, so until the
    /// event fires there is nothing to reap: `armed_reaped` says so to the next wait.
    /// (Completions taken meanwhile by a plain [`CompletionQueue::poll`] raised the
    /// event before they were taken, so the next wait wakes at once and re-arms.)
    fn arm_and_poll(&self, wc: &mut [WorkCompletion]) -> Result<Option<usize>> {
        match &self.imp {
            CqImp::Soft(c) => c.req_notify_before_poll(false),
            #[cfg(feature = "rdma")]
            CqImp::Verbs(_) => self.req_notify(false)?,
        }
        let n = self.poll(wc)?;
        if n < wc.len() {
            self.armed_reaped.store(true, Ordering::Release);
        }
        Ok((n > 0).then_some(n))
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
            .map_err(|e| Error::verb("registering the completion channel with tokio", e))?;
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
