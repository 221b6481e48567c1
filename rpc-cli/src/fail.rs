//! Why a command failed, and the exit status that says so.

use std::fmt;

use rpc_core::{Code, Status};

/// A failed command: bad input or an unreachable server (`Local`), or a call that
/// ended with an error status.
#[derive(Debug)]
pub(crate) enum Fail {
    Local(String),
    Status(Status),
}

impl Fail {
    /// 1 for a local failure; 64 + the status code for a call's status (as grpcurl).
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Fail::Local(_) => 1,
            Fail::Status(s) => 64 + s.code() as i32,
        }
    }
}

impl From<Status> for Fail {
    fn from(status: Status) -> Self {
        Fail::Status(status)
    }
}

/// A local failure from anything printable.
pub(crate) fn local(message: impl fmt::Display) -> Fail {
    Fail::Local(message.to_string())
}

impl fmt::Display for Fail {
    /// One line, then (for a status) its details and metadata, one per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fail::Local(message) => write!(f, "error: {message}"),
            Fail::Status(status) => {
                write!(
                    f,
                    "error: {}: {}",
                    code_name(status.code()),
                    status.message()
                )?;
                if !status.details().is_empty() {
                    write!(f, "\n  details: {} bytes: ", status.details().len())?;
                    for byte in status.details() {
                        write!(f, "{byte:02x}")?;
                    }
                }
                for (key, value) in crate::headers::printable(status.metadata()) {
                    write!(f, "\n  metadata: {key}: {value}")?;
                }
                Ok(())
            }
        }
    }
}

/// The status code as the gRPC specification spells it: `NOT_FOUND`.
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
