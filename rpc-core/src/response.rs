//! `Response`: a message with its metadata, as tonic's.

use crate::metadata::MetadataMap;

/// A response: the message plus metadata.
#[derive(Debug, Clone, Default)]
pub struct Response<T> {
    metadata: MetadataMap,
    message: T,
}

impl<T> Response<T> {
    /// Wraps a message.
    pub fn new(message: T) -> Self {
        Response {
            metadata: MetadataMap::new(),
            message,
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

    /// Consumes the response, returning the message.
    pub fn into_inner(self) -> T {
        self.message
    }

    /// Splits into metadata and message.
    pub fn into_parts(self) -> (MetadataMap, T) {
        (self.metadata, self.message)
    }

    /// Builds a response from metadata and a message.
    pub fn from_parts(metadata: MetadataMap, message: T) -> Self {
        Response { metadata, message }
    }

    /// Maps the message, keeping metadata.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Response<U> {
        Response {
            metadata: self.metadata,
            message: f(self.message),
        }
    }
}
