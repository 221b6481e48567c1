//! `MetadataValue`: an ASCII or binary value, with tonic's constructors, conversions
//! and comparisons.

use std::cmp::Ordering;
use std::error::Error;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::str::FromStr;

use bytes::Bytes;

use super::encoding::{is_visible_byte, Ascii, Binary, ValueEncoding};
use super::key::MetadataKey;

/// A metadata value of kind `VE` ([`Ascii`] or [`Binary`]).
///
/// Values compare with each other, with `str`, `String` and `[u8]` (either side, and
/// through references) by their bytes; a binary value's bytes are its raw bytes.
pub struct MetadataValue<VE: ValueEncoding> {
    bytes: Bytes,
    sensitive: bool,
    _e: PhantomData<VE>,
}

/// An ASCII value.
pub type AsciiMetadataValue = MetadataValue<Ascii>;
/// A binary value.
pub type BinaryMetadataValue = MetadataValue<Binary>;

/// Text that cannot be an ASCII value (a control character other than tab).
#[derive(Debug, Hash)]
pub struct InvalidMetadataValue {
    _priv: (),
}

impl fmt::Display for InvalidMetadataValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("failed to parse metadata value")
    }
}

impl Error for InvalidMetadataValue {}

/// Bytes that cannot be a value of the kind asked for.
#[derive(Debug, Hash)]
pub struct InvalidMetadataValueBytes(InvalidMetadataValue);

impl InvalidMetadataValueBytes {
    fn new() -> Self {
        InvalidMetadataValueBytes(InvalidMetadataValue { _priv: () })
    }
}

impl fmt::Display for InvalidMetadataValueBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Error for InvalidMetadataValueBytes {}

/// An ASCII value that is not all visible ASCII, asked for as text.
#[derive(Debug)]
pub struct ToStrError {
    _priv: (),
}

impl fmt::Display for ToStrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("failed to convert metadata to a str")
    }
}

impl Error for ToStrError {}

impl<VE: ValueEncoding> MetadataValue<VE> {
    /// A value checked by the caller (the wire decoder, a conversion).
    pub(super) fn from_checked(bytes: Bytes) -> Self {
        debug_assert!(VE::is_valid_value(&bytes));
        MetadataValue {
            bytes,
            sensitive: false,
            _e: PhantomData,
        }
    }

    /// A value from static text, without copying it when ASCII. A binary value's text
    /// is base64 (padded or not), as tonic's.
    ///
    /// # Panics
    /// If an ASCII value's text is not visible ASCII (tab allowed), or a binary
    /// value's is not base64.
    pub fn from_static(src: &'static str) -> Self {
        Self::from_checked(VE::from_static_text(src))
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The value's bytes (a binary value's raw bytes). Never an error here: the
    /// `Result` is tonic's, whose binary values are base64 that may not decode.
    pub fn to_bytes(&self) -> Result<Bytes, InvalidMetadataValueBytes> {
        Ok(self.bytes.clone())
    }

    /// Marks the value as sensitive: `Debug` prints `Sensitive` instead of it.
    pub fn set_sensitive(&mut self, val: bool) {
        self.sensitive = val;
    }

    /// Whether the value is marked sensitive.
    pub fn is_sensitive(&self) -> bool {
        self.sensitive
    }

    /// The bytes as stored and sent.
    pub(super) fn raw(&self) -> &Bytes {
        &self.bytes
    }
}

impl MetadataValue<Ascii> {
    /// The key's text as a value.
    pub fn from_key<KeyVE: ValueEncoding>(key: MetadataKey<KeyVE>) -> Self {
        key.into()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The value as text, when every byte is visible ASCII or tab.
    pub fn to_str(&self) -> Result<&str, ToStrError> {
        if !self.bytes.iter().all(|&b| is_visible_byte(b)) {
            return Err(ToStrError { _priv: () });
        }
        std::str::from_utf8(&self.bytes).map_err(|_| ToStrError { _priv: () })
    }

    /// The value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes sent: for an ASCII value, its bytes. (tonic has this for binary
    /// values too, where it is their base64 form; binary values here travel raw and
    /// have no other form.)
    pub fn as_encoded_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl MetadataValue<Binary> {
    /// A binary value of `src`.
    pub fn from_bytes(src: &[u8]) -> Self {
        Self::from_checked(Bytes::copy_from_slice(src))
    }
}

fn checked<VE: ValueEncoding>(
    bytes: Bytes,
) -> Result<MetadataValue<VE>, InvalidMetadataValueBytes> {
    if VE::is_valid_value(&bytes) {
        Ok(MetadataValue::from_checked(bytes))
    } else {
        Err(InvalidMetadataValueBytes::new())
    }
}

impl<VE: ValueEncoding> TryFrom<&[u8]> for MetadataValue<VE> {
    type Error = InvalidMetadataValueBytes;

    fn try_from(src: &[u8]) -> Result<Self, Self::Error> {
        if !VE::is_valid_value(src) {
            return Err(InvalidMetadataValueBytes::new());
        }
        Ok(Self::from_checked(Bytes::copy_from_slice(src)))
    }
}

impl<VE: ValueEncoding, const N: usize> TryFrom<&[u8; N]> for MetadataValue<VE> {
    type Error = InvalidMetadataValueBytes;

    fn try_from(src: &[u8; N]) -> Result<Self, Self::Error> {
        Self::try_from(&src[..])
    }
}

impl<VE: ValueEncoding> TryFrom<Bytes> for MetadataValue<VE> {
    type Error = InvalidMetadataValueBytes;

    fn try_from(src: Bytes) -> Result<Self, Self::Error> {
        checked(src)
    }
}

impl<VE: ValueEncoding> TryFrom<Vec<u8>> for MetadataValue<VE> {
    type Error = InvalidMetadataValueBytes;

    fn try_from(src: Vec<u8>) -> Result<Self, Self::Error> {
        checked(Bytes::from(src))
    }
}

impl FromStr for MetadataValue<Ascii> {
    type Err = InvalidMetadataValue;

    fn from_str(s: &str) -> Result<Self, InvalidMetadataValue> {
        Self::try_from(s.as_bytes()).map_err(|e| e.0)
    }
}

impl TryFrom<&str> for MetadataValue<Ascii> {
    type Error = InvalidMetadataValue;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl TryFrom<&String> for MetadataValue<Ascii> {
    type Error = InvalidMetadataValue;

    fn try_from(s: &String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl TryFrom<String> for MetadataValue<Ascii> {
    type Error = InvalidMetadataValue;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        checked(Bytes::from(s)).map_err(|e| e.0)
    }
}

impl<KeyVE: ValueEncoding> From<MetadataKey<KeyVE>> for MetadataValue<Ascii> {
    fn from(key: MetadataKey<KeyVE>) -> Self {
        Self::from_checked(Bytes::from(key))
    }
}

macro_rules! from_integers {
    ($($t:ty),*) => {$(
        impl From<$t> for MetadataValue<Ascii> {
            fn from(n: $t) -> Self {
                Self::from_checked(Bytes::from(n.to_string()))
            }
        }
    )*};
}

// Not u8, as tonic: `from(b'3')` would read as the character.
from_integers!(u16, i16, u32, i32, u64, i64, usize, isize);

/// The value's bytes.
impl From<MetadataValue<Ascii>> for Bytes {
    fn from(value: MetadataValue<Ascii>) -> Bytes {
        value.bytes
    }
}

/// The bytes tonic gives: a binary value's base64 text (unpadded), not its raw bytes
/// (which `to_bytes` gives).
impl From<MetadataValue<Binary>> for Bytes {
    fn from(value: MetadataValue<Binary>) -> Bytes {
        Bytes::from(super::base64::encode(&value.bytes))
    }
}

impl<VE: ValueEncoding> From<&MetadataValue<VE>> for MetadataValue<VE> {
    fn from(value: &MetadataValue<VE>) -> Self {
        value.clone()
    }
}

impl AsRef<[u8]> for MetadataValue<Ascii> {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl<VE: ValueEncoding> Clone for MetadataValue<VE> {
    fn clone(&self) -> Self {
        MetadataValue {
            bytes: self.bytes.clone(),
            sensitive: self.sensitive,
            _e: PhantomData,
        }
    }
}

impl<VE: ValueEncoding> fmt::Debug for MetadataValue<VE> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.sensitive {
            f.write_str("Sensitive")
        } else {
            VE::fmt_value(&self.bytes, f)
        }
    }
}

impl<VE: ValueEncoding> Hash for MetadataValue<VE> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bytes.hash(state)
    }
}

// Comparisons, by bytes. tonic orders binary values by their base64 text; here they
// order by their bytes, consistently with `==`.

impl<VE: ValueEncoding> PartialEq for MetadataValue<VE> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl<VE: ValueEncoding> Eq for MetadataValue<VE> {}

impl<VE: ValueEncoding> PartialOrd for MetadataValue<VE> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<VE: ValueEncoding> Ord for MetadataValue<VE> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.bytes.cmp(&other.bytes)
    }
}

/// `==` and `<` against a type that is bytes, either way round.
macro_rules! compare_with {
    ($($t:ty => |$o:ident| $bytes:expr;)*) => {$(
        impl<VE: ValueEncoding> PartialEq<$t> for MetadataValue<VE> {
            fn eq(&self, $o: &$t) -> bool {
                self.bytes[..] == *$bytes
            }
        }

        impl<VE: ValueEncoding> PartialEq<MetadataValue<VE>> for $t {
            fn eq(&self, other: &MetadataValue<VE>) -> bool {
                other == self
            }
        }

        impl<VE: ValueEncoding> PartialOrd<$t> for MetadataValue<VE> {
            fn partial_cmp(&self, $o: &$t) -> Option<Ordering> {
                self.bytes[..].partial_cmp($bytes)
            }
        }

        impl<VE: ValueEncoding> PartialOrd<MetadataValue<VE>> for $t {
            fn partial_cmp(&self, other: &MetadataValue<VE>) -> Option<Ordering> {
                other.partial_cmp(self).map(Ordering::reverse)
            }
        }
    )*};
}

compare_with! {
    str => |o| o.as_bytes();
    [u8] => |o| o;
    String => |o| o.as_bytes();
}

impl<VE: ValueEncoding> PartialEq<MetadataValue<VE>> for &str {
    fn eq(&self, other: &MetadataValue<VE>) -> bool {
        other == *self
    }
}

impl<VE: ValueEncoding> PartialOrd<MetadataValue<VE>> for &str {
    fn partial_cmp(&self, other: &MetadataValue<VE>) -> Option<Ordering> {
        (**self).partial_cmp(other)
    }
}

impl<VE: ValueEncoding> PartialEq<MetadataValue<VE>> for &MetadataValue<VE> {
    fn eq(&self, other: &MetadataValue<VE>) -> bool {
        **self == *other
    }
}

impl<VE: ValueEncoding> PartialOrd<MetadataValue<VE>> for &MetadataValue<VE> {
    fn partial_cmp(&self, other: &MetadataValue<VE>) -> Option<Ordering> {
        (**self).partial_cmp(other)
    }
}

impl<VE: ValueEncoding, T: ?Sized> PartialEq<&T> for MetadataValue<VE>
where
    MetadataValue<VE>: PartialEq<T>,
{
    fn eq(&self, other: &&T) -> bool {
        *self == **other
    }
}

impl<VE: ValueEncoding, T: ?Sized> PartialOrd<&T> for MetadataValue<VE>
where
    MetadataValue<VE>: PartialOrd<T>,
{
    fn partial_cmp(&self, other: &&T) -> Option<Ordering> {
        self.partial_cmp(*other)
    }
}
