//! Unix-socket plumbing for the shared-memory handshake: abstract-namespace stream
//! sockets (they exist only inside one network namespace and vanish with their last
//! descriptor: nothing to clean up in the filesystem), descriptors passed with
//! `SCM_RIGHTS`, and the peer's credentials (`SO_PEERCRED`) as the kernel saw them.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Most descriptors one message carries.
pub(crate) const MAX_FDS: usize = 2;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The abstract address `\0<name>` and its length.
fn abstract_addr(name: &str) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    let n = bytes.len().min(a.sun_path.len() - 1);
    for (d, s) in a.sun_path[1..=n].iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + n;
    (a, len as libc::socklen_t)
}

fn stream_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is checked.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: just created, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A non-blocking listener on the abstract name `name`.
pub(crate) fn listen(name: &str) -> io::Result<OwnedFd> {
    let fd = stream_socket()?;
    let (a, len) = abstract_addr(name);
    // SAFETY: `a` is a valid sockaddr_un of `len` bytes.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
    Ok(fd)
}

/// Connects to the abstract name `name` without blocking: a full backlog is an error
/// (the caller keeps TCP), never a wait.
pub(crate) fn connect(name: &str) -> io::Result<OwnedFd> {
    let fd = stream_socket()?;
    let (a, len) = abstract_addr(name);
    // SAFETY: as in `listen`.
    cvt(unsafe { libc::connect(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    Ok(fd)
}

/// Accepts one waiting connection (`None`: none waits). The accepted socket blocks,
/// with receive timeout `timeout`.
pub(crate) fn accept(listener: RawFd, timeout: Duration) -> io::Result<Option<OwnedFd>> {
    // SAFETY: plain syscall; null address pointers are allowed.
    let r = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: just accepted, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(r) };
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a live timeval of the size given.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    Ok(Some(fd))
}

/// The uid and pid of the process at the other end, as the kernel recorded them.
pub(crate) fn peer_cred(fd: RawFd) -> io::Result<(u32, i32)> {
    // SAFETY: an all-zero ucred is valid; the kernel fills it.
    let mut c: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` and `len` are live locals of the sizes given.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok((c.uid, c.pid))
}

/// Sends `data` with `fds` attached, in one message.
pub(crate) fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    assert!(fds.len() <= MAX_FDS);
    let mut space = [0u64; 8]; // aligned room for one cmsg of MAX_FDS descriptors
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: the msghdr names one live iovec and a control buffer large enough for
    // CMSG_SPACE(fd_bytes) (checked); CMSG_FIRSTHDR points into that buffer.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        let cap = libc::CMSG_SPACE(fd_bytes) as usize;
        assert!(cap <= std::mem::size_of_val(&space));
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = cap as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), fds.len());
        libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short handshake write",
        ));
    }
    Ok(())
}

/// Receives one message of at most `buf.len()` bytes and the descriptors attached to
/// it (every one received is owned by the result, so none leaks whatever follows).
/// `Ok(None)`: nothing yet (non-blocking socket).
pub(crate) fn recv_with_fds(
    sock: RawFd,
    buf: &mut [u8],
) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut space = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr naming one live iovec and a live, aligned control buffer.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space) as _;
    // SAFETY: as above; CLOEXEC on every received descriptor.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    let mut fds = Vec::new();
    // SAFETY: walks the control messages the kernel wrote into `space`, within
    // `msg_controllen`; each SCM_RIGHTS payload is an array of descriptors now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let p = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(p.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many descriptors attached",
        ));
    }
    Ok(Some((n as usize, fds)))
}

/// Whether `fd` is an eventfd (a peer could pass any descriptor).
/// Reads the descriptor's link with buffers on the stack: one runs for every QP a
/// same-host peer connects.
pub(crate) fn is_eventfd(fd: RawFd) -> bool {
    use std::io::Write;
    const EVENTFD: &[u8] = b"anon_inode:[eventfd]";
    let mut path = [0u8; 32];
    if write!(&mut path[..], "/proc/self/fd/{fd}\0").is_err() {
        return false;
    }
    let mut link = [0u8; EVENTFD.len() + 1];
    // SAFETY: `path` holds a NUL-terminated string (written above, zeroes after it);
    // readlink writes at most `link.len()` bytes into `link` and terminates nothing.
    let n = unsafe { libc::readlink(path.as_ptr().cast(), link.as_mut_ptr().cast(), link.len()) };
    usize::try_from(n).is_ok_and(|n| &link[..n] == EVENTFD)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Descriptors and bytes cross together; the credentials name this process.
    #[test]
    fn fds_and_credentials_cross() {
        let name = format!("rdma-rpc-test/{}/fds", std::process::id());
        let l = listen(&name).unwrap();
        let c = connect(&name).unwrap();
        let s = accept(l.as_raw_fd(), Duration::from_secs(5))
            .unwrap()
            .expect("a connection waits");
        let bell = crate::soft::sys::EventFd::new().unwrap();
        send_with_fds(c.as_raw_fd(), b"hello", &[bell.raw()]).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(s.as_raw_fd(), &mut buf).unwrap().unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        assert!(is_eventfd(fds[0].as_raw_fd()));
        assert!(!is_eventfd(s.as_raw_fd()));
        // SAFETY: getuid/getpid have no preconditions.
        let me = unsafe { (libc::getuid(), libc::getpid()) };
        assert_eq!(peer_cred(s.as_raw_fd()).unwrap(), me);
    }
}
