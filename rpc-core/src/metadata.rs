//! Call metadata: ASCII and binary (`-bin`) key/value pairs, as in gRPC.
//!
//! Keys are lowercase `[0-9a-z_.-]+`; keys of binary values end in `-bin`. ASCII values
//! are printable ASCII (0x20..=0x7e). The wire encoding is
//! `count:u16, (key_len:u8, key, value_len:u16, value)*`, big endian.

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use bytes::{Buf, BufMut, Bytes};

use crate::status::Status;

/// Default limit of one call's encoded metadata, as gRPC's default header list size.
pub const DEFAULT_METADATA_LIMIT: usize = 8 * 1024;

/// Marker for ASCII values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ascii {}
/// Marker for binary values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {}

/// A metadata value of encoding `E` ([`Ascii`] or [`Binary`]).
pub struct MetadataValue<E> {
    bytes: Bytes,
    _e: PhantomData<E>,
}

/// An ASCII value.
pub type AsciiMetadataValue = MetadataValue<Ascii>;
/// A binary value.
pub type BinaryMetadataValue = MetadataValue<Binary>;

/// A value or key that breaks the rules above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidMetadata(String);

impl fmt::Display for InvalidMetadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid metadata: {}", self.0)
    }
}

impl std::error::Error for InvalidMetadata {}

impl<E> Clone for MetadataValue<E> {
    fn clone(&self) -> Self {
        MetadataValue {
            bytes: self.bytes.clone(),
            _e: PhantomData,
        }
    }
}

impl<E> PartialEq for MetadataValue<E> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl<E> Eq for MetadataValue<E> {}

fn printable(b: &[u8]) -> bool {
    b.iter().all(|c| (0x20..=0x7e).contains(c))
}

impl MetadataValue<Ascii> {
    /// A value from a static string.
    ///
    /// # Panics
    /// If the string is not printable ASCII.
    pub fn from_static(s: &'static str) -> Self {
        s.parse().expect("metadata value must be printable ASCII")
    }

    /// The value as text.
    pub fn to_str(&self) -> &str {
        std::str::from_utf8(&self.bytes).expect("checked printable ASCII on construction")
    }
}

impl FromStr for MetadataValue<Ascii> {
    type Err = InvalidMetadata;

    fn from_str(s: &str) -> Result<Self, InvalidMetadata> {
        if !printable(s.as_bytes()) {
            return Err(InvalidMetadata(format!(
                "value {s:?} is not printable ASCII"
            )));
        }
        Ok(MetadataValue {
            bytes: Bytes::copy_from_slice(s.as_bytes()),
            _e: PhantomData,
        })
    }
}

impl MetadataValue<Binary> {
    /// A binary value.
    pub fn from_bytes(b: &[u8]) -> Self {
        MetadataValue {
            bytes: Bytes::copy_from_slice(b),
            _e: PhantomData,
        }
    }

    /// The raw bytes.
    pub fn to_bytes(&self) -> Bytes {
        self.bytes.clone()
    }
}

impl<E> AsRef<[u8]> for MetadataValue<E> {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl<E> fmt::Debug for MetadataValue<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(&self.bytes) {
            Ok(s) if printable(s.as_bytes()) => fmt::Debug::fmt(s, f),
            _ => fmt::Debug::fmt(&self.bytes, f),
        }
    }
}

fn check_key(key: &str, binary: bool) -> Result<(), InvalidMetadata> {
    let ok_chars = !key.is_empty()
        && key.len() <= 255
        && key.bytes().all(|c| {
            c.is_ascii_digit() || c.is_ascii_lowercase() || matches!(c, b'-' | b'_' | b'.')
        });
    if !ok_chars {
        return Err(InvalidMetadata(format!(
            "key {key:?} must be lowercase [0-9a-z_.-], 1..=255 bytes"
        )));
    }
    if key.ends_with("-bin") != binary {
        return Err(InvalidMetadata(format!(
            "key {key:?}: binary values need a key ending in -bin, ASCII values must not"
        )));
    }
    Ok(())
}

#[derive(Clone, PartialEq, Eq)]
enum Entry {
    Ascii(AsciiMetadataValue),
    Binary(BinaryMetadataValue),
}

impl Entry {
    fn bytes(&self) -> &Bytes {
        match self {
            Entry::Ascii(v) => &v.bytes,
            Entry::Binary(v) => &v.bytes,
        }
    }
}

/// A multimap of metadata entries, in insertion order.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct MetadataMap {
    entries: Vec<(Box<str>, Entry)>,
}

impl MetadataMap {
    /// An empty map (allocates nothing).
    pub fn new() -> Self {
        MetadataMap::default()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn first(&self, key: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| v)
    }

    /// Removes every value of `key` and appends `entry`; returns the first removed.
    fn put(&mut self, key: &str, entry: Entry) -> Option<Entry> {
        let mut old = None;
        self.entries.retain_mut(|(k, v)| {
            if &**k != key {
                return true;
            }
            if old.is_none() {
                old = Some(v.clone());
            }
            false
        });
        self.entries.push((key.into(), entry));
        old
    }

    /// Replaces all values of `key` with `value`; returns the previous first value.
    ///
    /// # Panics
    /// If `key` is not a valid ASCII-value key (see [`MetadataMap::try_insert`]).
    pub fn insert(&mut self, key: &str, value: AsciiMetadataValue) -> Option<AsciiMetadataValue> {
        self.try_insert(key, value).expect("invalid metadata key")
    }

    /// Like [`MetadataMap::insert`], returning an error for an invalid key.
    pub fn try_insert(
        &mut self,
        key: &str,
        value: AsciiMetadataValue,
    ) -> Result<Option<AsciiMetadataValue>, InvalidMetadata> {
        check_key(key, false)?;
        Ok(match self.put(key, Entry::Ascii(value)) {
            Some(Entry::Ascii(v)) => Some(v),
            _ => None,
        })
    }

    /// Replaces all values of binary `key` (ending in `-bin`).
    ///
    /// # Panics
    /// If `key` is not a valid binary key.
    pub fn insert_bin(
        &mut self,
        key: &str,
        value: BinaryMetadataValue,
    ) -> Option<BinaryMetadataValue> {
        check_key(key, true).expect("invalid binary metadata key");
        match self.put(key, Entry::Binary(value)) {
            Some(Entry::Binary(v)) => Some(v),
            _ => None,
        }
    }

    /// Adds a value without removing others of the same key.
    ///
    /// # Panics
    /// If `key` is not a valid ASCII-value key.
    pub fn append(&mut self, key: &str, value: AsciiMetadataValue) {
        check_key(key, false).expect("invalid metadata key");
        self.entries.push((key.into(), Entry::Ascii(value)));
    }

    /// The first ASCII value of `key`.
    pub fn get(&self, key: &str) -> Option<&AsciiMetadataValue> {
        match self.first(key) {
            Some(Entry::Ascii(v)) => Some(v),
            _ => None,
        }
    }

    /// The first binary value of `key`.
    pub fn get_bin(&self, key: &str) -> Option<&BinaryMetadataValue> {
        match self.first(key) {
            Some(Entry::Binary(v)) => Some(v),
            _ => None,
        }
    }

    /// Every value of `key`, raw.
    pub fn get_all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.entries
            .iter()
            .filter(move |(k, _)| &**k == key)
            .map(|(_, v)| &v.bytes()[..])
    }

    /// Removes every value of `key`; returns whether there was one.
    pub fn remove(&mut self, key: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(k, _)| &**k != key);
        before != self.entries.len()
    }

    /// All entries as (key, raw value).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries.iter().map(|(k, v)| (&**k, &v.bytes()[..]))
    }

    /// Size of [`MetadataMap::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        if self.entries.is_empty() {
            return 0;
        }
        2 + self
            .entries
            .iter()
            .map(|(k, v)| 1 + k.len() + 2 + v.bytes().len())
            .sum::<usize>()
    }

    /// Appends the wire encoding (nothing at all for an empty map).
    ///
    /// # Panics
    /// If a value is longer than 65535 bytes; callers check [`MetadataMap::encoded_len`]
    /// against their limit (at most [`u16::MAX`]) first.
    pub fn encode(&self, buf: &mut impl BufMut) {
        if self.entries.is_empty() {
            return;
        }
        buf.put_u16(u16::try_from(self.entries.len()).expect("metadata entry count"));
        for (k, v) in &self.entries {
            let v = v.bytes();
            buf.put_u8(k.len() as u8);
            buf.put_slice(k.as_bytes());
            buf.put_u16(u16::try_from(v.len()).expect("metadata value length"));
            buf.put_slice(v);
        }
    }

    /// Decodes [`MetadataMap::encode`]'s output, rejecting anything malformed with
    /// `INTERNAL` and anything over `limit` bytes with `RESOURCE_EXHAUSTED`.
    pub fn decode(mut src: &[u8], limit: usize) -> Result<MetadataMap, Status> {
        if src.len() > limit {
            return Err(Status::resource_exhausted(format!(
                "metadata of {} bytes exceeds the limit of {limit} bytes",
                src.len()
            )));
        }
        let mut map = MetadataMap::new();
        if src.is_empty() {
            return Ok(map);
        }
        let bad = || Status::internal("malformed metadata");
        if src.len() < 2 {
            return Err(bad());
        }
        let count = src.get_u16();
        for _ in 0..count {
            if src.remaining() < 1 {
                return Err(bad());
            }
            let klen = usize::from(src.get_u8());
            if src.remaining() < klen + 2 {
                return Err(bad());
            }
            let key = std::str::from_utf8(&src[..klen])
                .map_err(|_| bad())?
                .to_owned();
            src.advance(klen);
            let vlen = usize::from(src.get_u16());
            if src.remaining() < vlen {
                return Err(bad());
            }
            let bytes = Bytes::copy_from_slice(&src[..vlen]);
            src.advance(vlen);
            let binary = key.ends_with("-bin");
            check_key(&key, binary).map_err(|e| Status::internal(e.to_string()))?;
            let entry = if binary {
                Entry::Binary(MetadataValue {
                    bytes,
                    _e: PhantomData,
                })
            } else if printable(&bytes) {
                Entry::Ascii(MetadataValue {
                    bytes,
                    _e: PhantomData,
                })
            } else {
                return Err(Status::internal(format!(
                    "metadata {key:?} is not printable ASCII"
                )));
            };
            map.entries.push((key.into(), entry));
        }
        if src.has_remaining() {
            return Err(bad());
        }
        Ok(map)
    }
}

impl fmt::Debug for MetadataMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(k, v)| {
                let dbg: &dyn fmt::Debug = match v {
                    Entry::Ascii(a) => a,
                    Entry::Binary(b) => b,
                };
                (k, dbg)
            }))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_and_binary_values_round_trip_the_wire() {
        let mut m = MetadataMap::new();
        m.insert("x-user", "alice".parse().unwrap());
        m.append("x-tag", "a".parse().unwrap());
        m.append("x-tag", "b".parse().unwrap());
        m.insert_bin("trace-bin", MetadataValue::from_bytes(&[0, 159, 255]));
        let mut buf = Vec::new();
        m.encode(&mut buf);
        assert_eq!(buf.len(), m.encoded_len());
        let d = MetadataMap::decode(&buf, DEFAULT_METADATA_LIMIT).unwrap();
        assert_eq!(d, m);
        assert_eq!(d.get("x-user").unwrap().to_str(), "alice");
        assert_eq!(d.get_all("x-tag").count(), 2);
        assert_eq!(
            &d.get_bin("trace-bin").unwrap().to_bytes()[..],
            &[0, 159, 255]
        );
        assert!(d.get("trace-bin").is_none());
    }

    #[test]
    fn bad_keys_values_and_frames_are_rejected() {
        assert!("caf\u{e9}".parse::<AsciiMetadataValue>().is_err());
        let mut m = MetadataMap::new();
        assert!(m.try_insert("Upper", "v".parse().unwrap()).is_err());
        assert!(m.try_insert("x-bin", "v".parse().unwrap()).is_err());
        assert_eq!(
            MetadataMap::decode(&[0, 1, 5], 100).unwrap_err().code(),
            crate::Code::Internal
        );
        assert_eq!(
            MetadataMap::decode(&[0; 200], 100).unwrap_err().code(),
            crate::Code::ResourceExhausted
        );
    }
}
