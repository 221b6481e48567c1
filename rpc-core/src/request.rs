//! `Request`: a message with its metadata, as tonic's.

use std::time::Duration;

use crate::metadata::MetadataMap;

/// A request: the message plus metadata and an optional timeout.
#[derive(Debug, Clone, Default)]
pub struct Request<T> {
    metadata: MetadataMap,
    message: T,
    timeout: Option<Duration>,
}

impl<T> Request<T> {
    /// Wraps a message.
    pub fn new(message: T) -> Self {
        Request {
            metadata: MetadataMap::new(),
            message,
            timeout: None,
        }
    }

    /// The message.
    pub fn get_ref(&self) -> &T {
        &self.message
    }

    /// The message, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.message
    }

    /// The metadata.
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// The metadata, mutably.
    pub fn metadata_mut(&mut self) -> &mut MetadataMap {
        &mut self.metadata
    }

    /// Consumes the request, returning the message.
    pub fn into_inner(self) -> T {
        self.message
    }

    /// Splits into metadata and message.
    pub fn into_parts(self) -> (MetadataMap, T) {
        (self.metadata, self.message)
    }

    /// Builds a request from metadata and a message.
    pub fn from_parts(metadata: MetadataMap, message: T) -> Self {
        Request {
            metadata,
            message,
            timeout: None,
        }
    }

    /// Sets how long the call may take: the client fails it with `DEADLINE_EXCEEDED`
    /// when it passes, and the deadline travels to the server.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
    }

    /// The timeout set by [`Request::set_timeout`] (on the server: the time left
    /// when the call arrived).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Maps the message, keeping metadata and timeout.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Request<U> {
        Request {
            metadata: self.metadata,
            message: f(self.message),
            timeout: self.timeout,
        }
    }
}

/// Anything a generated client method accepts: a message or a `Request` of it.
pub trait IntoRequest<T>: sealed::Sealed {
    /// Wraps into a request.
    fn into_request(self) -> Request<T>;
}

impl<T> IntoRequest<T> for T {
    fn into_request(self) -> Request<T> {
        Request::new(self)
    }
}

impl<T> IntoRequest<T> for Request<T> {
    fn into_request(self) -> Request<T> {
        self
    }
}

mod sealed {
    pub trait Sealed {}
    impl<T> Sealed for T {}
}
