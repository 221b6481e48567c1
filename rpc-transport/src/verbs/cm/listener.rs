//! The passive side: one rdma_cm listener per iWARP device, and a thread that accepts
//! the connect requests of registered QPs.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::super::error::{check, last_error, set_nonblocking};
use super::super::ffi;
use super::id::{sockaddr_in, CmId, Private, MAX_RD_ATOMIC};
use crate::error::{Error, Result};

/// A QP waiting for its peer's connect request, then holding the accepted id.
struct Entry {
    /// The peer's QP number: a request from any other QP is rejected.
    peer: u32,
    conn: Option<CmId>,
    /// The QP's state as its side knows it: RTS once accepted.
    state: Arc<AtomicU32>,
}

/// Listens on `addr:port` of one device. Its thread holds it until the device closes
/// ([`Listener::shutdown`]); every QP that registered holds it too, and is gone by then.
pub(crate) struct Listener {
    channel: NonNull<ffi::rdma_event_channel>,
    /// Set once in `start`, destroyed in `drop` (before the channel).
    id: Option<CmId>,
    addr: SocketAddrV4,
    entries: Mutex<HashMap<u32, Entry>>,
    /// Written to stop the thread.
    stop: OwnedFd,
    thread: Mutex<Option<JoinHandle<()>>>,
}

// SAFETY: the channel and the listening id are used by the thread (events) and by
// `drop` (after the thread has ended); librdmacm calls are thread-safe.
unsafe impl Send for Listener {}
// SAFETY: as above; the entries are behind a mutex.
unsafe impl Sync for Listener {}

impl Listener {
    /// Listens on `ip` at a port the kernel picks, and starts the accepting thread.
    pub(crate) fn start(device: &str, ip: Ipv4Addr) -> Result<Arc<Listener>> {
        // SAFETY: no preconditions; null on failure.
        let channel = NonNull::new(unsafe { ffi::rdma_create_event_channel() })
            .ok_or_else(|| last_error("rdma_create_event_channel"))?;
        // SAFETY: no preconditions; the fd is ours, owned by `stop` from here on.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            // SAFETY: created above, no id on it yet.
            unsafe { ffi::rdma_destroy_event_channel(channel.as_ptr()) };
            return Err(last_error("eventfd"));
        }
        // SAFETY: a fresh fd that nothing else owns.
        let stop = unsafe { OwnedFd::from_raw_fd(efd) };
        let mut l = Listener {
            channel,
            id: None,
            addr: SocketAddrV4::new(ip, 0),
            entries: Mutex::new(HashMap::new()),
            stop,
            thread: Mutex::new(None),
        };
        let mut raw = ptr::null_mut();
        // SAFETY: live channel; `raw` is a valid out-pointer.
        check("rdma_create_id", unsafe {
            ffi::rdma_create_id(
                channel.as_ptr(),
                &mut raw,
                ptr::null_mut(),
                ffi::rdma_port_space::RDMA_PS_TCP,
            )
        })?;
        let id = CmId::own(raw).ok_or_else(|| last_error("rdma_create_id"))?;
        let raw = id.raw();
        l.id = Some(id);
        let mut sa = sockaddr_in(l.addr);
        // SAFETY: live id; `sa` is a sockaddr_in the call reads.
        check("rdma_bind_addr", unsafe {
            ffi::rdma_bind_addr(raw, (&mut sa as *mut libc::sockaddr_in).cast())
        })?;
        // SAFETY: live, bound id.
        check("rdma_listen", unsafe { ffi::rdma_listen(raw, 64) })?;
        // SAFETY: live, bound id; the port comes back in network order.
        let port = u16::from_be(unsafe { ffi::rdma_get_src_port(raw) });
        l.addr.set_port(port);
        // SAFETY: live channel; its fd is set once at creation.
        set_nonblocking("rdma_get_cm_event", unsafe { (*channel.as_ptr()).fd })?;
        let l = Arc::new(l);
        let me = l.clone();
        let thread = std::thread::Builder::new()
            .name(format!("rdma-cm-{device}"))
            .spawn(move || me.run())
            .map_err(|e| Error::Verb {
                verb: "spawn rdma_cm listener thread",
                source: e,
            })?;
        *l.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(thread);
        tracing::info!(device, addr = %l.addr, "rdma_cm listener started (iWARP)");
        Ok(l)
    }

    /// Where peers connect.
    pub(crate) fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// Accept the connect request of QP `peer` for QP `qpn` when it comes, and then
    /// set `state` to RTS.
    pub(crate) fn expect(&self, qpn: u32, peer: u32, state: Arc<AtomicU32>) {
        self.lock().insert(
            qpn,
            Entry {
                peer,
                conn: None,
                state,
            },
        );
    }

    /// QP `qpn` is being destroyed: drop its registration and connection (outside the
    /// lock: destroying an id waits for its events to be acknowledged by the thread).
    pub(crate) fn forget(&self, qpn: u32) {
        let entry = self.lock().remove(&qpn);
        drop(entry);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u32, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The thread: wait for events or the stop signal; acknowledge each event at once.
    fn run(self: Arc<Self>) {
        // SAFETY: live channel (destroyed only after this thread is joined).
        let cfd = unsafe { (*self.channel.as_ptr()).fd };
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: cfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.stop.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(error = %std::io::Error::last_os_error(), "rdma_cm listener: poll failed; it stops");
                return;
            }
            if fds[1].revents != 0 {
                return;
            }
            while let Some((kind, id, private)) = self.next_event() {
                if kind == ffi::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
                    self.on_request(id, &private);
                } else {
                    tracing::debug!(event = kind, "rdma_cm listener event");
                }
            }
        }
    }

    /// The next event, acknowledged (its id and private data copied out first).
    fn next_event(&self) -> Option<(u32, *mut ffi::rdma_cm_id, Vec<u8>)> {
        let mut ev = ptr::null_mut();
        // SAFETY: live channel in non-blocking mode; `ev` is a valid out-pointer.
        if unsafe { ffi::rdma_get_cm_event(self.channel.as_ptr(), &mut ev) } != 0 {
            return None;
        }
        // SAFETY: a live event until acknowledged below.
        let e = unsafe { &*ev };
        let private = if e.event == ffi::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
            // SAFETY: connect requests carry `param.conn`, whose private data (if any)
            // is `private_data_len` readable bytes until the event is acknowledged.
            let c = unsafe { &e.param.conn };
            if c.private_data.is_null() {
                Vec::new()
            } else {
                // SAFETY: as above.
                unsafe {
                    std::slice::from_raw_parts(
                        c.private_data.cast::<u8>(),
                        usize::from(c.private_data_len),
                    )
                }
                .to_vec()
            }
        } else {
            Vec::new()
        };
        let out = (e.event, e.id, private);
        // SAFETY: the event from rdma_get_cm_event, acknowledged once.
        unsafe { ffi::rdma_ack_cm_event(ev) };
        Some(out)
    }

    /// Accepts `id` with the QP its private data names if that QP expects this peer;
    /// rejects and destroys it otherwise.
    fn on_request(&self, id: *mut ffi::rdma_cm_id, private: &[u8]) {
        let Some(id) = CmId::own(id) else { return };
        let want = Private::parse(private);
        let mut entries = self.lock();
        let entry = want.and_then(|p| {
            entries
                .get_mut(&p.to)
                .filter(|e| e.peer == p.from && e.conn.is_none())
        });
        let Some(entry) = entry else {
            drop(entries);
            tracing::warn!(
                ?want,
                "rdma_cm: connect request for no waiting QP; rejected"
            );
            // SAFETY: live id of a connect request not yet answered.
            unsafe { ffi::rdma_reject(id.raw(), ptr::null(), 0) };
            return;
        };
        let qpn = want.map_or(0, |p| p.to);
        let mut param = ffi::rdma_conn_param {
            private_data: ptr::null(),
            private_data_len: 0,
            responder_resources: MAX_RD_ATOMIC,
            initiator_depth: MAX_RD_ATOMIC,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: qpn,
        };
        // RTS before the accept: the initiator may see the connection established, and
        // its test or peer look at this QP, before rdma_accept returns here.
        let rts = ffi::ibv_qp_state::IBV_QPS_RTS;
        let before = entry.state.swap(rts, Ordering::Relaxed);
        // SAFETY: live id of an unanswered connect request; `param` lives across the
        // call. The QP is alive: its registration is removed (under this lock) before
        // it is destroyed.
        let ret = unsafe { ffi::rdma_accept(id.raw(), &mut param) };
        if ret != 0 {
            entry.state.store(before, Ordering::Relaxed);
            tracing::warn!(qpn, error = %std::io::Error::last_os_error(), "rdma_accept failed");
            return;
        }
        tracing::debug!(qpn, peer = entry.peer, "rdma_cm: accepted");
        entry.conn = Some(id);
    }
}

impl Listener {
    /// Stops the thread (which holds the listener): called when the device closes.
    pub(crate) fn shutdown(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one` to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // The thread held an `Arc` of this: it has ended.
        self.entries
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.id = None;
        // SAFETY: every id on the channel is destroyed (the entries', the listening
        // one; rejected ones at once), and the thread that read it has ended.
        unsafe { ffi::rdma_destroy_event_channel(self.channel.as_ptr()) };
    }
}
