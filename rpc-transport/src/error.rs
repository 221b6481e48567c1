//! The transport layer's one error type.

use std::fmt;
use std::io;

use crate::qp_state::QpState;

/// Result alias for the transport layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in a verbs call, naming the verb that failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A verb failed in the provider or the operating system (`verb` is the ibverbs name,
    /// e.g. `"ibv_create_qp"`).
    Verb {
        /// The failing verb.
        verb: &'static str,
        /// The cause reported by the provider or the OS.
        source: io::Error,
    },
    /// No device with that name, or no device at all.
    NoDevice(String),
    /// A QP state transition that the verbs state machine does not allow.
    InvalidTransition {
        /// State the QP was in.
        from: QpState,
        /// State that was asked for.
        to: QpState,
    },
    /// A transition was asked for without an attribute it requires.
    MissingAttribute {
        /// The transition's target state.
        to: QpState,
        /// The attribute that was missing (e.g. `"dest"`).
        attribute: &'static str,
    },
    /// An argument is out of the range the device or the verbs API accepts.
    InvalidArgument(String),
    /// A post was refused before anything reached the queue from `index` on
    /// (ibverbs' `bad_wr`): WRs before `index` were posted.
    Post {
        /// Index in the posted list of the first WR not posted.
        index: usize,
        /// Why it was refused (queue full, bad state, too many SGEs, ...).
        reason: PostError,
    },
    /// The completion queue overflowed: completions were lost and the CQ is unusable.
    CqOverrun,
    /// Objects from different providers or devices were combined.
    ProviderMismatch,
}

/// Why a post was refused synchronously (ibverbs returns these as errno values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostError {
    /// The work queue is full (`ENOMEM`).
    QueueFull,
    /// The QP is in a state that does not accept this post (`EINVAL`).
    InvalidState,
    /// More scatter/gather entries than the queue was created for (`EINVAL`).
    TooManySges,
    /// Inline data larger than `max_inline_data` (`EINVAL`).
    InlineTooLarge,
    /// The opcode is not valid on this QP type (`EINVAL`), e.g. RDMA Read on UD.
    InvalidOpcode,
    /// A UD send without an address handle, or an RC send with one (`EINVAL`).
    BadDestination,
    /// A UD message longer than the port's MTU (`EMSGSIZE`). The verbs provider refuses
    /// it at post time because some devices (rxe, following IBA C10-93.1.1) would
    /// otherwise report success and send nothing.
    MessageTooLarge,
    /// The device does not offer this operation at all (`EINVAL`), e.g. Send with
    /// Immediate on iWARP or an atomic on a device without atomics; see
    /// [`crate::Device::caps`].
    Unsupported,
    /// The provider returned another errno.
    Os(i32),
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            PostError::QueueFull => "work queue full",
            PostError::InvalidState => "QP state does not accept this post",
            PostError::TooManySges => "too many scatter/gather entries",
            PostError::InlineTooLarge => "inline data exceeds max_inline_data",
            PostError::InvalidOpcode => "opcode not valid on this QP type",
            PostError::BadDestination => "destination does not match QP type",
            PostError::MessageTooLarge => "UD message longer than the port MTU",
            PostError::Unsupported => "the device does not support this operation",
            PostError::Os(e) => return write!(f, "os error {e}"),
        };
        f.write_str(s)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Verb { verb, source } => match source.raw_os_error() {
                // Name the limit, so that the fix (raise it, or use fewer) is evident.
                Some(libc::EMFILE) => match open_files_limit() {
                    Some(n) => write!(
                        f,
                        "{verb} failed: out of file descriptors (ulimit -n {n}): {source}"
                    ),
                    None => write!(f, "{verb} failed: out of file descriptors: {source}"),
                },
                Some(libc::ENFILE) => write!(
                    f,
                    "{verb} failed: the system's open-file table is full: {source}"
                ),
                _ => write!(f, "{verb} failed: {source}"),
            },
            Error::NoDevice(name) => write!(f, "no RDMA device {name}"),
            Error::InvalidTransition { from, to } => {
                write!(f, "invalid QP state transition {from:?} -> {to:?}")
            }
            Error::MissingAttribute { to, attribute } => {
                write!(f, "transition to {to:?} requires attribute `{attribute}`")
            }
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Error::Post { index, reason } => write!(f, "post refused at WR {index}: {reason}"),
            Error::CqOverrun => f.write_str("completion queue overrun"),
            Error::ProviderMismatch => {
                f.write_str("objects from different providers or devices were combined")
            }
        }
    }
}

/// This process's soft limit on open descriptors (`ulimit -n`).
fn open_files_limit() -> Option<libc::rlim_t> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a live local the call only writes.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some(r.rlim_cur)
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Verb { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Error {
    /// An OS-level failure of `verb`.
    pub fn verb(verb: &'static str, source: io::Error) -> Self {
        Error::Verb { verb, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_descriptors_names_the_limit() {
        let e = Error::verb("ibv_create_cq", io::Error::from_raw_os_error(libc::EMFILE));
        let s = e.to_string();
        assert!(
            s.starts_with("ibv_create_cq failed: out of file descriptors (ulimit -n "),
            "{s}"
        );
    }
}
