//! `Status`: how every failed call ends.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

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
    /// The error this status was made from, if any ([`Error::source`]).
    source: Option<Arc<dyn Error + Send + Sync + 'static>>,
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
            source: None,
        }))
    }

    /// [`Code::Ok`]: a status that is not an error (tonic's `Status::ok`).
    pub fn ok(message: impl Into<String>) -> Status {
        Status::new(Code::Ok, message)
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
    /// fails with `err` (tonic's `Status::from_error`): what
    /// [`Status::try_from_error`] finds, else `UNKNOWN` with the error's text and the
    /// error as its [`Error::source`].
    pub fn from_error(err: Box<dyn Error + Send + Sync + 'static>) -> Status {
        Status::try_from_error(err).unwrap_or_else(|err| {
            let mut status = Status::unknown(err.to_string());
            status.0.source = Some(err.into());
            status
        })
    }

    /// The status `err` stands for, or `err` back if nothing in it is recognised
    /// (tonic's `Status::try_from_error`). `err` and then its sources are inspected;
    /// the first that is recognised decides:
    ///
    /// * a `Status` comes back unchanged when it is `err` itself, and as a copy with
    ///   `err` as its source when it is further down (so a service's own status
    ///   passes through middleware that boxes errors, such as `Timeout`);
    /// * [`tower::timeout::error::Elapsed`] (a `timeout` layer) is `DEADLINE_EXCEEDED`
    ///   (tonic's own timeouts say `CANCELLED`; gRPC's code for a deadline is this);
    /// * [`tower::load_shed::error::Overloaded`] (a `load_shed` layer refusing a call
    ///   its inner service was not ready for) is `RESOURCE_EXHAUSTED`, with tonic's
    ///   message: gRPC's code for a server out of a resource. The handler did not
    ///   run, so a client may retry with backoff.
    pub fn try_from_error(
        err: Box<dyn Error + Send + Sync + 'static>,
    ) -> Result<Status, Box<dyn Error + Send + Sync + 'static>> {
        let err = match err.downcast::<Status>() {
            Ok(status) => return Ok(*status),
            Err(err) => err,
        };
        let mut found = None;
        let mut next: Option<&(dyn Error + 'static)> = Some(&*err);
        while let Some(e) = next {
            if let Some(status) = e.downcast_ref::<Status>() {
                // The source of the status found stays with it: the copy's is `err`.
                let mut copy = status.clone();
                copy.0.source = None;
                found = Some(copy);
            } else if e.is::<tower::timeout::error::Elapsed>() {
                found = Some(Status::deadline_exceeded(e.to_string()));
            } else if e.is::<tower::load_shed::error::Overloaded>() {
                found = Some(Status::shed());
            }
            if found.is_some() {
                break;
            }
            next = e.source();
        }
        match found {
            Some(mut status) => {
                status.0.source = Some(err.into());
                Ok(status)
            }
            None => Err(err),
        }
    }

    /// A call shed because its connection is at its limit: `RESOURCE_EXHAUSTED`, in
    /// tonic's words (a `load_shed` layer, `Server::load_shed`).
    pub(crate) fn shed() -> Status {
        Status::resource_exhausted("Too many active requests for the connection")
    }

    /// Sets the error this status was made from ([`Error::source`]), as tonic's.
    pub fn set_source(&mut self, source: Arc<dyn Error + Send + Sync + 'static>) -> &mut Status {
        self.0.source = Some(source);
        self
    }
}

/// As tonic's: empty fields left out, except `source`.
impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Status");
        d.field("code", &self.code());
        if !self.message().is_empty() {
            d.field("message", &self.message());
        }
        if !self.details().is_empty() {
            d.field("details", &self.details());
        }
        if !self.metadata().is_empty() {
            d.field("metadata", self.metadata());
        }
        d.field("source", &self.0.source).finish()
    }
}

/// As tonic's: `code: 'DESCRIPTION', message: "MESSAGE", source: SOURCE`, the last
/// two only when there is one. Details and metadata are left to `Debug`.
impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "code: '{}'", self.code())?;
        if !self.message().is_empty() {
            write!(f, ", message: {:?}", self.message())?;
        }
        if let Some(source) = &self.0.source {
            write!(f, ", source: {source:?}")?;
        }
        Ok(())
    }
}

impl Error for Status {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source.as_ref().map(|e| &**e as _)
    }
}

/// The code of an I/O error's kind, as tonic maps it.
impl From<std::io::Error> for Status {
    fn from(e: std::io::Error) -> Status {
        use std::io::ErrorKind::*;
        let code = match e.kind() {
            BrokenPipe | WouldBlock | WriteZero | Interrupted => Code::Internal,
            ConnectionRefused | ConnectionReset | NotConnected | AddrInUse | AddrNotAvailable => {
                Code::Unavailable
            }
            AlreadyExists => Code::AlreadyExists,
            ConnectionAborted => Code::Aborted,
            InvalidData => Code::DataLoss,
            InvalidInput => Code::InvalidArgument,
            NotFound => Code::NotFound,
            PermissionDenied => Code::PermissionDenied,
            TimedOut => Code::DeadlineExceeded,
            UnexpectedEof => Code::OutOfRange,
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

    #[test]
    fn display_and_debug_are_tonic_s() {
        let s = Status::not_found("no item \"X\"");
        assert_eq!(
            s.to_string(),
            r#"code: 'Some requested entity was not found', message: "no item \"X\"""#
        );
        assert_eq!(
            format!("{s:?}"),
            r#"Status { code: NotFound, message: "no item \"X\"", source: None }"#
        );
        assert_eq!(
            Status::unimplemented("").to_string(),
            "code: 'Operation is not implemented or not supported'"
        );
        assert_eq!(
            format!("{:?}", Status::ok("")),
            "Status { code: Ok, source: None }"
        );
    }

    #[test]
    fn an_error_s_status_keeps_the_error_as_its_source() {
        let io = std::io::Error::other("disk on fire");
        let s = Status::from_error(Box::new(io));
        assert_eq!(s.code(), Code::Unknown);
        assert_eq!(s.source().unwrap().to_string(), "disk on fire");
        assert!(
            s.to_string()
                .ends_with(r#", source: Custom { kind: Other, error: "disk on fire" }"#),
            "{s}"
        );
        // A status inside another error is found, with that error as its source.
        let inner = Status::aborted("boxed");
        let wrapped: Box<dyn Error + Send + Sync> = Box::new(Wrapper(inner));
        let s = Status::try_from_error(wrapped).expect("found");
        assert_eq!((s.code(), s.message()), (Code::Aborted, "boxed"));
        assert!(s.source().is_some());
        let plain: Box<dyn Error + Send + Sync> = "nothing to see".into();
        assert!(Status::try_from_error(plain).is_err());
    }

    #[derive(Debug)]
    struct Wrapper(Status);

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("wrapper")
        }
    }

    impl Error for Wrapper {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn io_errors_map_as_tonic_s() {
        use std::io::ErrorKind::*;
        let cases = [
            (NotFound, Code::NotFound),
            (AlreadyExists, Code::AlreadyExists),
            (InvalidData, Code::DataLoss),
            (UnexpectedEof, Code::OutOfRange),
            (BrokenPipe, Code::Internal),
            (ConnectionAborted, Code::Aborted),
            (AddrInUse, Code::Unavailable),
            (TimedOut, Code::DeadlineExceeded),
            (Other, Code::Unknown),
        ];
        for (kind, code) in cases {
            assert_eq!(
                Status::from(std::io::Error::from(kind)).code(),
                code,
                "{kind:?}"
            );
        }
    }
}
