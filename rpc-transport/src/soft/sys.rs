//! Thin wrappers over the Linux primitives the provider waits on: eventfd and epoll.
//!
//! `std` has neither; `libc` calls are kept here so the rest of the provider only sees
//! owned descriptors and safe methods.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A non-blocking eventfd: readable while its counter is non-zero.
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub(crate) fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; a valid descriptor is returned or -1.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes the descriptor readable (adds one to the counter).
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live local; the fd is owned by `self`. A full
        // counter (EAGAIN) still leaves the descriptor readable, which is all we need.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter so the descriptor stops being readable.
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live local; EAGAIN (already zero) is fine.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Takes over an eventfd received from elsewhere (the caller checked its kind).
    pub(crate) fn from_owned(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }

    /// A second descriptor for the same eventfd (to hand to a peer).
    pub(crate) fn try_clone_owned(&self) -> io::Result<OwnedFd> {
        self.0.try_clone()
    }
}

/// A level-triggered epoll set whose events carry a caller-chosen `u64` token.
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for readability, reporting `token`.
    pub(crate) fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` is a live local; the kernel validates both descriptors.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    /// Watches `fd` for readability once: after reporting it, the set ignores `fd`
    /// until [`Epoll::rearm`].
    pub(crate) fn add_oneshot(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token)
    }

    /// Re-enables a one-shot watch (errors are ignored: the fd may have closed).
    pub(crate) fn rearm(&self, fd: RawFd, token: u64) {
        let _ = self.ctl(libc::EPOLL_CTL_MOD, fd, token);
    }

    /// As `rearm`, with another token, saying whether `fd` was watched at all.
    pub(crate) fn modify(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token)
    }

    /// Re-enables a one-shot watch for readability or writability, whichever comes
    /// first.
    pub(crate) fn rearm_writable(&self, fd: RawFd, token: u64) {
        let _ = self.ctl_events(libc::EPOLL_CTL_MOD, fd, token, libc::EPOLLOUT);
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64) -> io::Result<()> {
        self.ctl_events(op, fd, token, 0)
    }

    fn ctl_events(
        &self,
        op: libc::c_int,
        fd: RawFd,
        token: u64,
        extra: libc::c_int,
    ) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLONESHOT | extra) as u32,
            u64: token,
        };
        // SAFETY: `ev` is a live local; the kernel validates both descriptors.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }

    /// Stops watching `fd` (errors are ignored: a closed fd leaves the set by itself).
    pub(crate) fn remove(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `add`.
        unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Waits up to `timeout_ms` (0: don't wait, -1: forever); returns the ready tokens.
    pub(crate) fn wait<'a>(
        &self,
        events: &'a mut [libc::epoll_event],
        timeout_ms: i32,
    ) -> &'a [libc::epoll_event] {
        let max = events.len().min(i32::MAX as usize) as i32;
        // SAFETY: `events` is a live, writable buffer of `max` entries.
        let n =
            unsafe { libc::epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr(), max, timeout_ms) };
        &events[..n.max(0) as usize]
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// An empty event array for [`Epoll::wait`].
pub(crate) fn events<const N: usize>() -> [libc::epoll_event; N] {
    [libc::epoll_event { events: 0, u64: 0 }; N]
}
