//! From libibverbs return conventions to the transport's [`Error`].
//!
//! libibverbs is not uniform: creation verbs return NULL and set `errno`; most others
//! return 0 or an errno value (some providers return it negated, some return -1 and set
//! `errno`). These helpers fold all of that into `Error::Verb`.

use std::io;
use std::os::fd::RawFd;
use std::os::raw::c_int;

use crate::error::{Error, PostError, Result};

/// The error of a verb that reported failure through `errno`.
pub(super) fn last_error(verb: &'static str) -> Error {
    Error::verb(verb, io::Error::last_os_error())
}

/// The errno a verb's return value `ret` stands for (0 = success).
pub(super) fn errno_of(ret: c_int) -> c_int {
    match ret {
        0 => 0,
        r if r > 0 => r,
        // -1 with errno set, or a negated errno.
        r => match io::Error::last_os_error().raw_os_error() {
            Some(e) if e != 0 && r == -1 => e,
            _ => -r,
        },
    }
}

/// `Ok(())` for 0, else the verb's error.
pub(super) fn check(verb: &'static str, ret: c_int) -> Result<()> {
    match errno_of(ret) {
        0 => Ok(()),
        e => Err(Error::verb(verb, io::Error::from_raw_os_error(e))),
    }
}

/// The reason of a refused post, from its errno. `EINVAL` is ambiguous in ibverbs (bad
/// state, bad opcode, too many SGEs, ...); the caller has already ruled out the
/// argument errors it can see, so what is left is the QP's state when `bad_state`.
pub(super) fn post_reason(errno: c_int, bad_state: bool) -> PostError {
    match errno {
        libc::ENOMEM => PostError::QueueFull,
        libc::EINVAL if bad_state => PostError::InvalidState,
        // siw refuses posts to a QP that is not connected (not RTS) with ENOTCONN.
        libc::ENOTCONN => PostError::InvalidState,
        e => PostError::Os(e),
    }
}

/// Makes a descriptor non-blocking, so that reading an empty event queue returns
/// `EAGAIN` instead of sleeping in the kernel.
pub(super) fn set_nonblocking(verb: &'static str, fd: RawFd) -> Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; F_GETFL/F_SETFL touch no memory.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(last_error(verb));
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(last_error(verb));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_conventions_fold_to_errno() {
        assert_eq!(errno_of(0), 0);
        assert_eq!(errno_of(libc::ENOMEM), libc::ENOMEM);
        assert_eq!(errno_of(-libc::EINVAL), libc::EINVAL);
        assert!(check("ibv_modify_qp", libc::EINVAL).is_err());
        assert!(check("ibv_modify_qp", 0).is_ok());
    }

    #[test]
    fn post_errno_maps_to_reason() {
        assert_eq!(post_reason(libc::ENOMEM, false), PostError::QueueFull);
        assert_eq!(post_reason(libc::EINVAL, true), PostError::InvalidState);
        assert_eq!(post_reason(libc::ENOTCONN, false), PostError::InvalidState);
        assert_eq!(
            post_reason(libc::EINVAL, false),
            PostError::Os(libc::EINVAL)
        );
    }
}
