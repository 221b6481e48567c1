//! Raising the process's open-file limit to what it may have.
//!
//! Every connection holds descriptors (the soft provider: a client channel about 7,
//! its sockets, event fds, an epoll and a pidfd; a server connection about 5). Under
//! the soft limit most shells and service managers start a process with, 1,024, a
//! client runs out at about 145 channels and a server below its default of 1,024
//! connections, although the hard limit is usually far higher. Go's runtime raises
//! the soft limit to the hard one at start for the same reason; this does it once,
//! when the first device opens. A process that set its own soft limit lower than
//! the hard one on purpose keeps the raised one: the hard limit still holds.

use std::sync::Once;

/// Raises `RLIMIT_NOFILE`'s soft limit to its hard limit, once per process.
pub(crate) fn raise_once() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| match raise() {
        Ok((from, to)) if from != to => {
            tracing::debug!(from, to, "raised the open-file limit to its hard limit");
        }
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "open-file limit not raised"),
    });
}

/// The soft limit before and after.
fn raise() -> std::io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a pointer to a live, aligned
    // local of that type, and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let from = lim.rlim_cur;
    if lim.rlim_cur >= lim.rlim_max {
        return Ok((from, from));
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads one `rlimit` from a live local; raising the soft limit
    // up to the hard one needs no privilege and affects nothing but later opens.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((from, lim.rlim_cur))
}

#[cfg(test)]
mod tests {
    fn limits() -> libc::rlimit {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in `raise`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        lim
    }

    #[test]
    fn a_lowered_soft_limit_is_raised_to_the_hard_limit() {
        let hard = limits().rlim_max;
        // Low, yet roomy enough for the tests running beside this one.
        let low = hard.min(4096) - 1;
        let lowered = libc::rlimit {
            rlim_cur: low,
            rlim_max: hard,
        };
        // SAFETY: as in `raise`; lowering the soft limit needs no privilege either.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) }, 0);
        assert_eq!(super::raise().unwrap(), (low, hard));
        assert_eq!(limits().rlim_cur, hard);
    }
}
