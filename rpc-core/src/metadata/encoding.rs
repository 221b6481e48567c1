//! The two kinds of metadata value and the rules of each kind's keys and values.

use std::fmt;
use std::hash::Hash;

use super::key::MetadataKey;
use super::map::Slot;
use super::value::MetadataValue;

/// Marker for ASCII values: keys that do not end in `-bin`, values of visible text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ascii {}

/// Marker for binary values: keys that end in `-bin`, values of any bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Binary {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Ascii {}
    impl Sealed for super::Binary {}
}

/// [`Ascii`] or [`Binary`]: the type parameter of keys and values. Sealed, and not
/// exported, as in tonic: code names `MetadataValue<Ascii>` or `MetadataValue<Binary>`.
pub trait ValueEncoding:
    Clone + Copy + Eq + Hash + fmt::Debug + Send + Sync + 'static + sealed::Sealed
{
    /// Whether `key` names a value of this kind, by its `-bin` suffix alone (tonic's
    /// `ValueEncoding::is_valid_key`).
    fn is_valid_key(key: &str) -> bool;

    /// Whether `bytes` may be a value of this kind (the wire's check, too).
    #[doc(hidden)]
    fn is_valid_value(bytes: &[u8]) -> bool;

    /// The value `from_static` makes of `text`; panics as tonic's does.
    #[doc(hidden)]
    fn from_static_text(text: &'static str) -> bytes::Bytes;

    /// The value's text for `Debug`.
    #[doc(hidden)]
    fn fmt_value(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result;

    /// The key and value of a slot of this kind.
    #[doc(hidden)]
    fn slot(slot: &Slot) -> Option<(&MetadataKey<Self>, &MetadataValue<Self>)>;

    /// The key and mutable value of a slot of this kind.
    #[doc(hidden)]
    fn slot_mut(slot: &mut Slot) -> Option<(&MetadataKey<Self>, &mut MetadataValue<Self>)>;

    /// A slot of this kind.
    #[doc(hidden)]
    fn into_slot(key: MetadataKey<Self>, value: MetadataValue<Self>) -> Slot;

    /// The value of a slot of this kind.
    #[doc(hidden)]
    fn from_slot(slot: Slot) -> Option<MetadataValue<Self>>;
}

/// HTTP's field-value bytes: anything but controls other than tab.
pub(super) fn is_field_byte(b: u8) -> bool {
    (b >= 0x20 && b != 0x7f) || b == b'\t'
}

/// Visible ASCII or tab: what `to_str` and `from_static` accept.
pub(super) fn is_visible_byte(b: u8) -> bool {
    (0x20..0x7f).contains(&b) || b == b'\t'
}

impl ValueEncoding for Ascii {
    fn is_valid_key(key: &str) -> bool {
        !Binary::is_valid_key(key)
    }

    fn is_valid_value(bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| is_field_byte(b))
    }

    fn from_static_text(text: &'static str) -> bytes::Bytes {
        assert!(
            text.bytes().all(is_visible_byte),
            "metadata value {text:?} is not visible ASCII"
        );
        bytes::Bytes::from_static(text.as_bytes())
    }

    fn fmt_value(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // As HTTP's header values: quoted, `"` escaped, other bytes in hex.
        f.write_str("\"")?;
        for &b in bytes {
            match b {
                b'"' => f.write_str("\\\"")?,
                b if is_visible_byte(b) => fmt::Write::write_char(f, char::from(b))?,
                b => write!(f, "\\x{b:x}")?,
            }
        }
        f.write_str("\"")
    }

    fn slot(slot: &Slot) -> Option<(&MetadataKey<Self>, &MetadataValue<Self>)> {
        match slot {
            Slot::Ascii(k, v) => Some((k, v)),
            Slot::Binary(..) => None,
        }
    }

    fn slot_mut(slot: &mut Slot) -> Option<(&MetadataKey<Self>, &mut MetadataValue<Self>)> {
        match slot {
            Slot::Ascii(k, v) => Some((k, v)),
            Slot::Binary(..) => None,
        }
    }

    fn into_slot(key: MetadataKey<Self>, value: MetadataValue<Self>) -> Slot {
        Slot::Ascii(key, value)
    }

    fn from_slot(slot: Slot) -> Option<MetadataValue<Self>> {
        match slot {
            Slot::Ascii(_, v) => Some(v),
            Slot::Binary(..) => None,
        }
    }
}

impl ValueEncoding for Binary {
    fn is_valid_key(key: &str) -> bool {
        key.ends_with("-bin")
    }

    fn is_valid_value(_: &[u8]) -> bool {
        true
    }

    fn from_static_text(text: &'static str) -> bytes::Bytes {
        match super::base64::decode(text.as_bytes()) {
            Some(raw) => raw.into(),
            None => panic!("Invalid base64 passed to from_static: {text}"),
        }
    }

    fn fmt_value(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&bytes::Bytes::copy_from_slice(bytes), f)
    }

    fn slot(slot: &Slot) -> Option<(&MetadataKey<Self>, &MetadataValue<Self>)> {
        match slot {
            Slot::Binary(k, v) => Some((k, v)),
            Slot::Ascii(..) => None,
        }
    }

    fn slot_mut(slot: &mut Slot) -> Option<(&MetadataKey<Self>, &mut MetadataValue<Self>)> {
        match slot {
            Slot::Binary(k, v) => Some((k, v)),
            Slot::Ascii(..) => None,
        }
    }

    fn into_slot(key: MetadataKey<Self>, value: MetadataValue<Self>) -> Slot {
        Slot::Binary(key, value)
    }

    fn from_slot(slot: Slot) -> Option<MetadataValue<Self>> {
        match slot {
            Slot::Binary(_, v) => Some(v),
            Slot::Ascii(..) => None,
        }
    }
}
