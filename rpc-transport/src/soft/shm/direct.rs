//! Placing RDMA Read responses straight into the requester's memory: one copy,
//! `process_vm_writev`, instead of two through a ring.
//!
//! A [`PeerWriter`] is this side's right to write into the peer process. It exists only
//! if the handshake's probe (a real `process_vm_writev` into a word the peer named,
//! [`probe_cell`]) succeeded, so the kernel has already said yes once: same user, no
//! Yama restriction, a dumpable peer, a pid visible in this namespace. It holds a
//! pidfd opened at that moment and looks at it before every copy, so a peer that
//! exited (and whose pid may be reused) is never written: only a pid reused between
//! that look and one of the copy's own lookups of the pid (at most one segment's copy
//! later, a fraction of a millisecond, and the whole pid space must wrap meanwhile)
//! escapes the guard.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::soft::device::{bump, Device, MAX_SGE};
use crate::soft::pieces::Pieces;

/// The word peers probe: its address goes into this side's handshake messages and a
/// peer that may write here proves it by writing it.
static PROBE: AtomicU64 = AtomicU64::new(0);

/// The address of this process's probe word (a peer's probe writes it).
pub(crate) fn probe_cell() -> u64 {
    PROBE.as_ptr() as u64
}

/// What a handshake's probe decided for one QP, counted in the device's statistics
/// and logged: the writer to use, or `None` (Read responses go through the ring).
pub(crate) fn settle(
    dev: &Device,
    qpn: u32,
    probe: Option<io::Result<PeerWriter>>,
) -> Option<PeerWriter> {
    match probe? {
        Ok(w) => {
            bump(&dev.stats.rc_direct_links);
            tracing::debug!(
                qpn,
                peer_pid = w.pid,
                "soft RC QP places Read responses directly"
            );
            Some(w)
        }
        Err(e) => {
            bump(&dev.stats.rc_direct_refused);
            tracing::debug!(qpn, error = %e, "soft RC QP sends Read responses through the ring");
            None
        }
    }
}

/// Why a copy into (or out of) the peer failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteError {
    /// The peer process is gone (it exited, or its pid no longer names it).
    Gone,
    /// The kernel refuses (the peer became non-dumpable, say): use the ring.
    Denied,
    /// The peer's range is not writable (or readable) memory of the peer: it named a
    /// range it does not own, which only a broken peer does.
    BadAddress,
}

/// The right to write into one peer process (see the module docs).
pub(crate) struct PeerWriter {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    /// A copy was refused after the probe had passed: the ring carries the rest.
    denied: AtomicBool,
}

impl PeerWriter {
    /// Opens a pidfd for `pid` (from `SO_PEERCRED`; 0 means the peer is not visible in
    /// this pid namespace) and probes by writing the peer's probe word at `cell`.
    pub(crate) fn probe(pid: i32, cell: u64) -> io::Result<PeerWriter> {
        if pid <= 0 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the peer's pid is not visible in this pid namespace",
            ));
        }
        if cell == 0 || !cell.is_multiple_of(8) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the peer offers no probe word",
            ));
        }
        // SAFETY: plain syscall with two integer arguments; the result is checked.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just opened, owned by nobody else (pidfds are close-on-exec).
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let w = PeerWriter {
            pid,
            pidfd,
            denied: AtomicBool::new(false),
        };
        let nonce = u64::from(std::process::id()) | 1 << 63;
        // SAFETY: `nonce` is a live local of 8 bytes.
        let n = unsafe { write_once(pid, std::ptr::from_ref(&nonce).cast(), 8, cell) }
            .map_err(|e| io::Error::other(format!("probe write refused: {e:?}")))?;
        if n != 8 {
            return Err(io::Error::other("probe write was short"));
        }
        Ok(w)
    }

    /// Whether copies may still go this way (none was refused since the probe).
    pub(crate) fn usable(&self) -> bool {
        !self.denied.load(Ordering::Relaxed)
    }

    /// Whether the peer process has exited (its pidfd is readable).
    fn exited(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, no wait.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r != 0 // readable (exited), or poll itself failed: do not write
    }

    /// Copies the peer's bytes at `src` into `into` until it is full (a lent segment,
    /// `rc::responder`): one `process_vm_readv` per pass of the kernel. A refusal marks
    /// this side unusable, as for a write.
    pub(crate) fn read_into(&self, into: &mut Pieces, src: u64) -> Result<(), WriteError> {
        self.guarded(|pid| read_range(pid, into, src))
    }

    /// Copies `len` bytes at `src` to the peer's address `dst`, whole; `split`: with a
    /// second thread's help ([`super::split_copy`]). A refusal marks the writer
    /// unusable (the caller falls back to the ring for what is left).
    ///
    /// # Safety
    /// `src..src + len` must be readable memory of this process, live for the call.
    pub(crate) unsafe fn write(
        &self,
        src: *const u8,
        len: usize,
        dst: u64,
        split: bool,
    ) -> Result<(), WriteError> {
        self.guarded(|pid| {
            // SAFETY: the caller's guarantee.
            unsafe {
                if split {
                    super::split_copy::write(pid, src, len, dst)
                } else {
                    write_range(pid, src, len, dst)
                }
            }
        })
    }

    /// Runs one copy to or from the peer: none once it has exited, and a refusal marks
    /// this side unusable (the caller falls back to the ring).
    fn guarded(
        &self,
        copy: impl FnOnce(libc::pid_t) -> Result<(), WriteError>,
    ) -> Result<(), WriteError> {
        if self.exited() {
            return Err(WriteError::Gone);
        }
        let r = copy(self.pid);
        if r == Err(WriteError::Denied) {
            self.denied.store(true, Ordering::Relaxed);
        }
        r
    }
}

/// Copies process `pid`'s bytes at `src` into `into` until it is full, in as many
/// `process_vm_readv` calls as the kernel needs.
fn read_range(pid: libc::pid_t, into: &mut Pieces, src: u64) -> Result<(), WriteError> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_SGE];
    let mut at = src;
    while !into.is_discard() {
        let k = into.iovecs(&mut iov);
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: into.left(),
        };
        // SAFETY: each local iovec names a checked range of registered memory that
        // `into` keeps alive; the kernel checks `remote` against the peer's mappings
        // and reads nothing of this process.
        let n = unsafe { libc::process_vm_readv(pid, iov.as_ptr(), k as _, &remote, 1, 0) };
        match n {
            0 => return Err(WriteError::BadAddress),
            n if n > 0 => {
                into.advance(n as usize);
                at += n as u64;
            }
            _ => {
                if let Some(e) = refusal(io::Error::last_os_error()) {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Copies `len` bytes at `src` into process `pid` at `dst`, whole, in as many
/// `process_vm_writev` calls as the kernel needs.
///
/// # Safety
/// `src..src + len` must be readable memory of this process, live for the call.
pub(crate) unsafe fn write_range(
    pid: libc::pid_t,
    src: *const u8,
    len: usize,
    dst: u64,
) -> Result<(), WriteError> {
    let mut done = 0;
    while done < len {
        // SAFETY: the caller's guarantee covers `src + done..src + len`.
        match unsafe { write_once(pid, src.add(done), len - done, dst + done as u64) }? {
            0 => return Err(WriteError::BadAddress),
            n => done += n,
        }
    }
    Ok(())
}

/// One `process_vm_writev`; returns the bytes written (maybe fewer than asked).
///
/// # Safety
/// As [`write_range`].
unsafe fn write_once(
    pid: libc::pid_t,
    src: *const u8,
    len: usize,
    dst: u64,
) -> Result<usize, WriteError> {
    let local = libc::iovec {
        iov_base: src as *mut libc::c_void,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: dst as *mut libc::c_void,
        iov_len: len,
    };
    loop {
        // SAFETY: `local` names memory the caller guarantees readable; the kernel
        // checks `remote` against the peer's mappings and writes nothing here.
        let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        if let Some(e) = refusal(io::Error::last_os_error()) {
            return Err(e);
        }
    }
}

/// What a failed `process_vm_writev`/`readv` means; `None`: interrupted, try again.
fn refusal(e: io::Error) -> Option<WriteError> {
    Some(match e.raw_os_error() {
        Some(libc::EINTR) => return None,
        Some(libc::ESRCH) => WriteError::Gone,
        Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::ENOSYS) => WriteError::Denied,
        _ => WriteError::BadAddress,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process may write itself: the probe passes against its own word, and a copy
    /// lands byte for byte.
    #[test]
    fn probe_and_copy_into_self() {
        let me = std::process::id() as i32;
        let w = PeerWriter::probe(me, probe_cell()).expect("writing oneself is allowed");
        assert_eq!(
            PROBE.load(Ordering::Relaxed),
            u64::from(me as u32) | 1 << 63
        );
        let src: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        // SAFETY: `src` is live and readable for the call.
        unsafe { w.write(src.as_ptr(), src.len(), dst.as_mut_ptr() as u64, false) }.unwrap();
        assert!(dst == src);
        assert!(w.usable());
    }

    /// Pid 0 (the peer is in a pid namespace this one cannot see) and a missing probe
    /// word are refused before any system call could write anything.
    #[test]
    fn invisible_pid_and_missing_cell_are_refused() {
        assert!(PeerWriter::probe(0, probe_cell()).is_err());
        assert!(PeerWriter::probe(std::process::id() as i32, 0).is_err());
    }

    /// An address the peer does not own is a bad address, not a crash or a partial
    /// success.
    #[test]
    fn unmapped_destination_is_a_bad_address() {
        let w = PeerWriter::probe(std::process::id() as i32, probe_cell()).unwrap();
        let b = [1u8; 64];
        // SAFETY: `b` is live and readable.
        let r = unsafe { w.write(b.as_ptr(), b.len(), 8, false) };
        assert_eq!(r, Err(WriteError::BadAddress));
    }
}
