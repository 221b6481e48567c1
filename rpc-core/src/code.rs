//! gRPC status codes.

use std::fmt;

/// The 17 gRPC status codes, with gRPC's numeric values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Code {
    /// Not an error.
    Ok = 0,
    /// The operation was cancelled, typically by the caller.
    Cancelled = 1,
    /// Unknown error.
    Unknown = 2,
    /// The client specified an invalid argument.
    InvalidArgument = 3,
    /// The deadline expired before the operation could complete.
    DeadlineExceeded = 4,
    /// Some requested entity was not found.
    NotFound = 5,
    /// The entity a client attempted to create already exists.
    AlreadyExists = 6,
    /// The caller lacks permission.
    PermissionDenied = 7,
    /// Some resource has been exhausted (including a message over the size limit).
    ResourceExhausted = 8,
    /// The system is not in a state required for the operation.
    FailedPrecondition = 9,
    /// The operation was aborted.
    Aborted = 10,
    /// The operation was attempted past the valid range.
    OutOfRange = 11,
    /// The operation is not implemented or supported.
    Unimplemented = 12,
    /// Internal error.
    Internal = 13,
    /// The service is currently unavailable (including a peer that went away).
    Unavailable = 14,
    /// Unrecoverable data loss or corruption.
    DataLoss = 15,
    /// The request lacks valid authentication credentials.
    Unauthenticated = 16,
}

impl Code {
    /// Maps a wire value; unknown values become [`Code::Unknown`], as gRPC does.
    pub fn from_i32(v: i32) -> Code {
        use Code::*;
        const ALL: [Code; 17] = [
            Ok,
            Cancelled,
            Unknown,
            InvalidArgument,
            DeadlineExceeded,
            NotFound,
            AlreadyExists,
            PermissionDenied,
            ResourceExhausted,
            FailedPrecondition,
            Aborted,
            OutOfRange,
            Unimplemented,
            Internal,
            Unavailable,
            DataLoss,
            Unauthenticated,
        ];
        usize::try_from(v)
            .ok()
            .and_then(|i| ALL.get(i).copied())
            .unwrap_or(Unknown)
    }

    /// A short description, as tonic's `Code::description`.
    pub fn description(&self) -> &'static str {
        use Code::*;
        match self {
            Ok => "The operation completed successfully",
            Cancelled => "The operation was cancelled",
            Unknown => "Unknown error",
            InvalidArgument => "Client specified an invalid argument",
            DeadlineExceeded => "Deadline expired before operation could complete",
            NotFound => "Some requested entity was not found",
            AlreadyExists => "Some entity that we attempted to create already exists",
            PermissionDenied => {
                "The caller does not have permission to execute the specified operation"
            }
            ResourceExhausted => "Some resource has been exhausted",
            FailedPrecondition => {
                "The system is not in a state required for the operation's execution"
            }
            Aborted => "The operation was aborted",
            OutOfRange => "Operation was attempted past the valid range",
            Unimplemented => "Operation is not implemented or not supported",
            Internal => "Internal error",
            Unavailable => "The service is currently unavailable",
            DataLoss => "Unrecoverable data loss or corruption",
            Unauthenticated => "The request does not have valid authentication credentials",
        }
    }
}

impl From<i32> for Code {
    fn from(v: i32) -> Code {
        Code::from_i32(v)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.description(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_values_round_trip_and_unknown_maps_to_unknown() {
        for v in 0..17 {
            assert_eq!(Code::from_i32(v) as i32, v);
        }
        assert_eq!(Code::from_i32(17), Code::Unknown);
        assert_eq!(Code::from_i32(-1), Code::Unknown);
    }
}
