//! `Response`: a message with its metadata and extensions, as tonic's.

use crate::extensions::Extensions;
use crate::metadata::MetadataMap;

/// A response: the message, the metadata sent with it, and [`Extensions`] (values for
/// the layers around a service or the client's caller, never on the wire).
#[derive(Debug, Clone, Default)]
pub struct Response<T> {
    metadata: MetadataMap,
    message: T,
    extensions: Extensions,
}

impl<T> Response<T> {
    /// Wraps a message, with no metadata and no extensions.
    pub fn new(message: T) -> Self {
        Response {
            metadata: MetadataMap::new(),
            message,
            extensions: Extensions::new(),
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

    /// Splits into metadata, message and extensions (tonic's order).
    pub fn into_parts(self) -> (MetadataMap, T, Extensions) {
        (self.metadata, self.message, self.extensions)
    }

    /// Builds a response from metadata, a message and extensions (tonic's order).
    pub fn from_parts(metadata: MetadataMap, message: T, extensions: Extensions) -> Self {
        Response {
            metadata,
            message,
            extensions,
        }
    }

    /// Maps the message, keeping metadata and extensions.
    pub fn map<F, U>(self, f: F) -> Response<U>
    where
        F: FnOnce(T) -> U,
    {
        Response {
            metadata: self.metadata,
            message: f(self.message),
            extensions: self.extensions,
        }
    }

    /// The extensions.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The extensions, mutably.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }
}

impl<T> From<T> for Response<T> {
    fn from(message: T) -> Self {
        Response::new(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Served(u32);

    #[test]
    fn parts_round_trip_in_tonics_order_and_map_keeps_them() {
        let mut r = Response::from(7u8);
        r.metadata_mut()
            .insert("x-k", crate::metadata::MetadataValue::from_static("v"));
        r.extensions_mut().insert(Served(1));
        *r.get_mut() += 1;

        let r = r.map(u32::from);
        let (metadata, message, extensions) = r.into_parts();
        assert_eq!(message, 8u32);
        let r = Response::from_parts(metadata, message, extensions);
        assert_eq!(*r.get_ref(), 8);
        assert_eq!(r.metadata().get("x-k").unwrap(), "v");
        assert_eq!(r.extensions().get::<Served>(), Some(&Served(1)));
        assert_eq!(r.into_inner(), 8);
    }
}
