//! `MetadataKey`: a validated key of an ASCII or binary value.

use std::borrow::{Borrow, Cow};
use std::error::Error;
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use bytes::Bytes;

use super::encoding::{Ascii, Binary, ValueEncoding};

/// A key of values of kind `VE`: lowercase `[0-9a-z_.-]`, 1 to 255 bytes, ending in
/// `-bin` exactly when `VE` is [`Binary`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct MetadataKey<VE: ValueEncoding> {
    name: Cow<'static, str>,
    _e: PhantomData<VE>,
}

/// A key of ASCII values.
pub type AsciiMetadataKey = MetadataKey<Ascii>;
/// A key of binary values.
pub type BinaryMetadataKey = MetadataKey<Binary>;

/// A key that breaks the rules of [`MetadataKey`].
#[derive(Debug, Default)]
pub struct InvalidMetadataKey {
    _priv: (),
}

impl InvalidMetadataKey {
    /// The error (public as tonic's, for code that builds its own keys).
    #[doc(hidden)]
    pub fn new() -> InvalidMetadataKey {
        InvalidMetadataKey::default()
    }
}

impl fmt::Display for InvalidMetadataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid gRPC metadata key name")
    }
}

impl Error for InvalidMetadataKey {}

/// gRPC's key characters and the wire's length limit (a `u8`).
pub(super) fn is_valid_name(name: &[u8]) -> bool {
    (1..=255).contains(&name.len())
        && name.iter().all(|&c| {
            c.is_ascii_digit() || c.is_ascii_lowercase() || matches!(c, b'-' | b'_' | b'.')
        })
}

impl<VE: ValueEncoding> MetadataKey<VE> {
    /// A key from bytes, lowercased first (as tonic's, which `X-Trace` passes as
    /// `x-trace`); an error when they break the rules or name the other kind.
    pub fn from_bytes(src: &[u8]) -> Result<Self, InvalidMetadataKey> {
        let lower = src.to_ascii_lowercase();
        if !is_valid_name(&lower) {
            return Err(InvalidMetadataKey::new());
        }
        let name = String::from_utf8(lower).map_err(|_| InvalidMetadataKey::new())?;
        if !VE::is_valid_key(&name) {
            return Err(InvalidMetadataKey::new());
        }
        Ok(MetadataKey {
            name: Cow::Owned(name),
            _e: PhantomData,
        })
    }

    /// A key from a static string, without copying it.
    ///
    /// # Panics
    /// If the string breaks the rules (uppercase included) or names the other kind.
    pub fn from_static(src: &'static str) -> Self {
        assert!(
            is_valid_name(src.as_bytes()),
            "invalid metadata key {src:?}: lowercase [0-9a-z_.-], 1..=255 bytes"
        );
        assert!(
            VE::is_valid_key(src),
            "invalid metadata key {src:?}: -bin names binary values"
        );
        MetadataKey {
            name: Cow::Borrowed(src),
            _e: PhantomData,
        }
    }

    /// A key checked by the wire decoder (valid for `VE`).
    pub(super) fn from_checked(name: String) -> Self {
        debug_assert!(is_valid_name(name.as_bytes()) && VE::is_valid_key(&name));
        MetadataKey {
            name: Cow::Owned(name),
            _e: PhantomData,
        }
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.name
    }
}

impl<VE: ValueEncoding> FromStr for MetadataKey<VE> {
    type Err = InvalidMetadataKey;

    fn from_str(s: &str) -> Result<Self, InvalidMetadataKey> {
        MetadataKey::from_bytes(s.as_bytes())
    }
}

impl<VE: ValueEncoding> AsRef<str> for MetadataKey<VE> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl<VE: ValueEncoding> AsRef<[u8]> for MetadataKey<VE> {
    fn as_ref(&self) -> &[u8] {
        self.as_str().as_bytes()
    }
}

impl<VE: ValueEncoding> Borrow<str> for MetadataKey<VE> {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl<VE: ValueEncoding> fmt::Debug for MetadataKey<VE> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<VE: ValueEncoding> fmt::Display for MetadataKey<VE> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl<VE: ValueEncoding> From<&MetadataKey<VE>> for MetadataKey<VE> {
    fn from(key: &MetadataKey<VE>) -> Self {
        key.clone()
    }
}

impl<VE: ValueEncoding> From<MetadataKey<VE>> for Bytes {
    fn from(key: MetadataKey<VE>) -> Bytes {
        match key.name {
            Cow::Borrowed(s) => Bytes::from_static(s.as_bytes()),
            Cow::Owned(s) => Bytes::from(s),
        }
    }
}

impl<VE: ValueEncoding> PartialEq<&MetadataKey<VE>> for MetadataKey<VE> {
    fn eq(&self, other: &&MetadataKey<VE>) -> bool {
        *self == **other
    }
}

impl<VE: ValueEncoding> PartialEq<MetadataKey<VE>> for &MetadataKey<VE> {
    fn eq(&self, other: &MetadataKey<VE>) -> bool {
        **self == *other
    }
}

// Against text, as HTTP's header names: the text may differ in ASCII case.
impl<VE: ValueEncoding> PartialEq<str> for MetadataKey<VE> {
    fn eq(&self, other: &str) -> bool {
        self.as_str().eq_ignore_ascii_case(other)
    }
}

impl<VE: ValueEncoding> PartialEq<MetadataKey<VE>> for str {
    fn eq(&self, other: &MetadataKey<VE>) -> bool {
        other == self
    }
}

impl<VE: ValueEncoding> PartialEq<&str> for MetadataKey<VE> {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

impl<VE: ValueEncoding> PartialEq<MetadataKey<VE>> for &str {
    fn eq(&self, other: &MetadataKey<VE>) -> bool {
        other == *self
    }
}
