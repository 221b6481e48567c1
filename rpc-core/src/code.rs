//! gRPC status codes.

use std::fmt;

/// The 17 gRPC status codes, with gRPC's numeric values (`code as i32`, or
/// `i32::from(code)`, is the value on the wire).
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
    /// The code of a wire value; values gRPC does not define are [`Code::Unknown`], as
    /// gRPC and tonic say.
    pub const fn from_i32(v: i32) -> Code {
        use Code::*;
        match v {
            0 => Ok,
            1 => Cancelled,
            2 => Unknown,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            _ => Unknown,
        }
    }

    /// The code written in decimal ASCII, as in a `grpc-status` header (`b"14"` is
    /// [`Code::Unavailable`]); anything else (a sign, a leading zero, spaces, a value
    /// gRPC does not define) is [`Code::Unknown`], as tonic's `Code::from_bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Code {
        let v = match bytes {
            [d @ b'0'..=b'9'] => i32::from(d - b'0'),
            [b'1', d @ b'0'..=b'6'] => 10 + i32::from(d - b'0'),
            _ => return Code::Unknown,
        };
        Code::from_i32(v)
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

impl From<Code> for i32 {
    fn from(code: Code) -> i32 {
        code as i32
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
            assert_eq!(i32::from(Code::from(v)), v);
        }
        assert_eq!(Code::from(17), Code::Unknown);
        assert_eq!(Code::from_i32(-1), Code::Unknown);
        assert_eq!(Code::from_i32(i32::MAX), Code::Unknown);
    }

    #[test]
    fn grpc_status_text_parses_as_tonic_does() {
        for v in 0..17 {
            assert_eq!(
                Code::from_bytes(v.to_string().as_bytes()),
                Code::from_i32(v)
            );
        }
        for bad in [
            &b""[..],
            b"17",
            b"20",
            b"01",
            b"-1",
            b" 1",
            b"1 ",
            b"100",
            b"a",
        ] {
            assert_eq!(Code::from_bytes(bad), Code::Unknown, "{bad:?}");
        }
    }

    #[test]
    fn display_is_the_description() {
        assert_eq!(
            Code::NotFound.to_string(),
            "Some requested entity was not found"
        );
        assert_eq!(
            Code::Ok.description(),
            "The operation completed successfully"
        );
    }
}
