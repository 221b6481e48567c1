//! `Status`: how every failed call ends.

use std::fmt;

use bytes::Bytes;

use crate::code::Code;
use crate::metadata::MetadataMap;

/// A gRPC-style error: a [`Code`], a message, optional binary details and metadata.
/// Boxed so that `Result<T, Status>` stays one pointer wide on the error side.
#[derive(Clone)]
pub struct Status(Box<Inner>);

#[derive(Clone)]
struct Inner {
    code: Code,
    message: String,
    details: Bytes,
    metadata: MetadataMap,
}

macro_rules! constructors {
    ($($(#[$doc:meta])* $name:ident => $code:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(message: impl Into<String>) -> Status {
                Status::new(Code::$code, message)
            }
        )*
    };
}

impl Status {
    /// A status with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status(Box::new(Inner {
            code,
            message: message.into(),
            details: Bytes::new(),
            metadata: MetadataMap::new(),
        }))
    }

    /// A status with binary details (e.g. an encoded `google.rpc.Status`).
    pub fn with_details(code: Code, message: impl Into<String>, details: Bytes) -> Status {
        let mut s = Status::new(code, message);
        s.0.details = details;
        s
    }

    /// A status carrying metadata (the trailers), as tonic's.
    pub fn with_metadata(code: Code, message: impl Into<String>, metadata: MetadataMap) -> Status {
        let mut s = Status::new(code, message);
        s.0.metadata = metadata;
        s
    }

    /// A status with binary details and metadata, as tonic's.
    pub fn with_details_and_metadata(
        code: Code,
        message: impl Into<String>,
        details: Bytes,
        metadata: MetadataMap,
    ) -> Status {
        let mut s = Status::with_details(code, message, details);
        s.0.metadata = metadata;
        s
    }

    constructors! {
        /// [`Code::Cancelled`].
        cancelled => Cancelled;
        /// [`Code::Unknown`].
        unknown => Unknown;
        /// [`Code::InvalidArgument`].
        invalid_argument => InvalidArgument;
        /// [`Code::DeadlineExceeded`].
        deadline_exceeded => DeadlineExceeded;
        /// [`Code::NotFound`].
        not_found => NotFound;
        /// [`Code::AlreadyExists`].
        already_exists => AlreadyExists;
        /// [`Code::PermissionDenied`].
        permission_denied => PermissionDenied;
        /// [`Code::ResourceExhausted`].
        resource_exhausted => ResourceExhausted;
        /// [`Code::FailedPrecondition`].
        failed_precondition => FailedPrecondition;
        /// [`Code::Aborted`].
        aborted => Aborted;
        /// [`Code::OutOfRange`].
        out_of_range => OutOfRange;
        /// [`Code::Unimplemented`].
        unimplemented => Unimplemented;
        /// [`Code::Internal`].
        internal => Internal;
        /// [`Code::Unavailable`].
        unavailable => Unavailable;
        /// [`Code::DataLoss`].
        data_loss => DataLoss;
        /// [`Code::Unauthenticated`].
        unauthenticated => Unauthenticated;
    }

    /// The status code.
    pub fn code(&self) -> Code {
        self.0.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// Binary details.
    pub fn details(&self) -> &[u8] {
        &self.0.details
    }

    /// The details as shared bytes (the engine sends them without a copy).
    pub(crate) fn details_bytes(&self) -> &Bytes {
        &self.0.details
    }

    /// Sets the details (the engine, once a status's details have arrived).
    pub(crate) fn set_details(&mut self, details: Bytes) {
        self.0.details = details;
    }

    /// Metadata sent with the status.
    pub fn metadata(&self) -> &MetadataMap {
        &self.0.metadata
    }

    /// Mutable metadata sent with the status.
    pub fn metadata_mut(&mut self) -> &mut MetadataMap {
        &mut self.0.metadata
    }

    /// The status a call ends with when its service, or tower middleware around it,
    /// fails with `err` (tonic's `Status::from_error`). `err` and then its sources
    /// are inspected; the first that is recognised decides:
    ///
    /// * a `Status` comes back unchanged (so a service's own status passes through
    ///   middleware that boxes errors, such as `Timeout`);
    /// * [`tower::timeout::error::Elapsed`] (a `timeout` layer) is `DEADLINE_EXCEEDED`;
    /// * [`tower::load_shed::error::Overloaded`] (a `load_shed` layer refusing a call
    ///   its inner service was not ready for) is `RESOURCE_EXHAUSTED`: what tonic
    ///   answers, and gRPC's code for a server out of a resource. The handler did not
    ///   run, so a client may retry with backoff.
    ///
    /// Anything else is `UNKNOWN` with the error's text.
    pub fn from_error(err: Box<dyn std::error::Error + Send + Sync + 'static>) -> Status {
        let err = match err.downcast::<Status>() {
            Ok(status) => return *status,
            Err(err) => err,
        };
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&*err);
        while let Some(e) = next {
            if let Some(status) = e.downcast_ref::<Status>() {
                return status.clone();
            }
            if e.is::<tower::timeout::error::Elapsed>() {
                return Status::deadline_exceeded(e.to_string());
            }
            if e.is::<tower::load_shed::error::Overloaded>() {
                return Status::resource_exhausted(e.to_string());
            }
            next = e.source();
        }
        Status::unknown(err.to_string())
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Status");
        d.field("code", &self.code())
            .field("message", &self.message());
        if !self.details().is_empty() {
            d.field("details", &self.details());
        }
        if !self.metadata().is_empty() {
            d.field("metadata", self.metadata());
        }
        d.finish()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "status: {:?}, message: {:?}",
            self.code(),
            self.message()
        )
    }
}

impl std::error::Error for Status {}

impl From<std::io::Error> for Status {
    fn from(e: std::io::Error) -> Status {
        use std::io::ErrorKind::*;
        let code = match e.kind() {
            ConnectionRefused | ConnectionReset | ConnectionAborted | NotConnected | BrokenPipe
            | AddrNotAvailable => Code::Unavailable,
            TimedOut => Code::DeadlineExceeded,
            PermissionDenied => Code::PermissionDenied,
            InvalidInput | InvalidData => Code::InvalidArgument,
            _ => Code::Unknown,
        };
        Status::new(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_set_code_and_message() {
        let s = Status::invalid_argument("name is empty");
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "name is empty");
        assert_eq!(Status::unavailable("x").code(), Code::Unavailable);
        assert_eq!(std::mem::size_of::<Status>(), std::mem::size_of::<usize>());
    }
}
