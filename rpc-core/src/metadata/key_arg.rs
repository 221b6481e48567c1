//! What `MetadataMap`'s methods take as a key, as tonic's (sealed, unnameable) traits:
//! lookups take a `MetadataKey`, a reference to one, `&str`, `String` or `&String`;
//! insertions take a `MetadataKey`, a reference to one, or a `&'static str` (which
//! panics when invalid: a key built at run time goes through `MetadataKey::from_bytes`,
//! whose error can be handled).

use super::encoding::ValueEncoding;
use super::key::MetadataKey;

mod sealed {
    /// The key's text as given (a lookup ignores its ASCII case).
    pub trait KeyText {
        fn key_text(&self) -> &str;
    }

    /// The key to store.
    pub trait IntoKey<VE: super::ValueEncoding> {
        fn into_key(self) -> super::MetadataKey<VE>;
    }
}

use sealed::{IntoKey, KeyText};

/// A key that looks up values of kind `VE`.
pub trait AsMetadataKey<VE: ValueEncoding>: KeyText {}

/// A key that looks up values of either kind (`contains_key`).
pub trait AsEncodingAgnosticMetadataKey: KeyText {}

/// A key that stores values of kind `VE`.
pub trait IntoMetadataKey<VE: ValueEncoding>: IntoKey<VE> {}

impl<VE: ValueEncoding> KeyText for MetadataKey<VE> {
    fn key_text(&self) -> &str {
        self.as_str()
    }
}

impl<VE: ValueEncoding> KeyText for &MetadataKey<VE> {
    fn key_text(&self) -> &str {
        self.as_str()
    }
}

impl KeyText for &str {
    fn key_text(&self) -> &str {
        self
    }
}

impl KeyText for String {
    fn key_text(&self) -> &str {
        self
    }
}

impl KeyText for &String {
    fn key_text(&self) -> &str {
        self
    }
}

impl<VE: ValueEncoding> AsMetadataKey<VE> for MetadataKey<VE> {}
impl<VE: ValueEncoding> AsMetadataKey<VE> for &MetadataKey<VE> {}
impl<VE: ValueEncoding> AsMetadataKey<VE> for &str {}
impl<VE: ValueEncoding> AsMetadataKey<VE> for String {}
impl<VE: ValueEncoding> AsMetadataKey<VE> for &String {}

impl<VE: ValueEncoding> AsEncodingAgnosticMetadataKey for MetadataKey<VE> {}
impl<VE: ValueEncoding> AsEncodingAgnosticMetadataKey for &MetadataKey<VE> {}
impl AsEncodingAgnosticMetadataKey for &str {}
impl AsEncodingAgnosticMetadataKey for String {}
impl AsEncodingAgnosticMetadataKey for &String {}

impl<VE: ValueEncoding> IntoKey<VE> for MetadataKey<VE> {
    fn into_key(self) -> MetadataKey<VE> {
        self
    }
}

impl<VE: ValueEncoding> IntoKey<VE> for &MetadataKey<VE> {
    fn into_key(self) -> MetadataKey<VE> {
        self.clone()
    }
}

impl<VE: ValueEncoding> IntoKey<VE> for &'static str {
    fn into_key(self) -> MetadataKey<VE> {
        MetadataKey::from_static(self)
    }
}

impl<VE: ValueEncoding> IntoMetadataKey<VE> for MetadataKey<VE> {}
impl<VE: ValueEncoding> IntoMetadataKey<VE> for &MetadataKey<VE> {}
impl<VE: ValueEncoding> IntoMetadataKey<VE> for &'static str {}
