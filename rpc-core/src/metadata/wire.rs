//! The wire encoding of a `MetadataMap`:
//! `count:u16, (key_len:u8, key, value_len:u16, value)*`, big endian, nothing at all
//! for an empty map. A key ending in `-bin` carries a binary value (raw bytes), any
//! other an ASCII value.

use bytes::{Buf, BufMut, Bytes};

use super::encoding::{Ascii, Binary, ValueEncoding};
use super::key::{is_valid_name, MetadataKey};
use super::map::{MetadataMap, Slot};
use super::value::MetadataValue;
use crate::status::Status;

/// Names gRPC keeps for its own headers: a map may hold them, but they are not sent
/// (tonic drops them from every request, response and status it sends). A call's
/// `grpc-timeout` travels in its frame instead.
const RESERVED: [&str; 6] = [
    "te",
    "content-type",
    "grpc-message",
    "grpc-message-type",
    "grpc-status",
    "grpc-timeout",
];

impl Slot {
    fn is_sent(&self) -> bool {
        !RESERVED.contains(&self.name())
    }

    fn raw_value(&self) -> &Bytes {
        match self {
            Slot::Ascii(_, v) => v.raw(),
            Slot::Binary(_, v) => v.raw(),
        }
    }
}

impl MetadataMap {
    fn sent(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().filter(|s| s.is_sent())
    }

    /// Size of [`MetadataMap::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        let entries = self
            .sent()
            .map(|s| 1 + s.name().len() + 2 + s.raw_value().len())
            .sum::<usize>();
        if entries == 0 {
            0
        } else {
            2 + entries
        }
    }

    /// Appends the wire encoding of the entries that are sent (nothing at all when
    /// there are none; gRPC's reserved names are never sent).
    ///
    /// # Panics
    /// If a value is longer than 65535 bytes; callers check [`MetadataMap::encoded_len`]
    /// against their limit (at most [`u16::MAX`]) first.
    pub fn encode(&self, buf: &mut impl BufMut) {
        let count = self.sent().count();
        if count == 0 {
            return;
        }
        buf.put_u16(u16::try_from(count).expect("metadata entry count"));
        for s in self.sent() {
            let (k, v) = (s.name(), s.raw_value());
            buf.put_u8(u8::try_from(k.len()).expect("keys are at most 255 bytes"));
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
        // Room for exactly the entries announced (a deadline's `grpc-timeout` alone:
        // one slot, not the four a push would reserve). An entry takes 4 bytes at
        // least (two lengths and a key byte), so a count the bytes cannot hold
        // reserves no more than they could.
        map.slots
            .reserve_exact(usize::from(count).min(src.remaining() / 4));
        for _ in 0..count {
            if src.remaining() < 1 {
                return Err(bad());
            }
            let klen = usize::from(src.get_u8());
            if src.remaining() < klen + 2 {
                return Err(bad());
            }
            let key = &src[..klen];
            if !is_valid_name(key) {
                return Err(Status::internal(format!(
                    "metadata key {:?} must be lowercase [0-9a-z_.-], 1..=255 bytes",
                    String::from_utf8_lossy(key)
                )));
            }
            let key = String::from_utf8(key.to_vec()).map_err(|_| bad())?;
            src.advance(klen);
            let vlen = usize::from(src.get_u16());
            if src.remaining() < vlen {
                return Err(bad());
            }
            let bytes = Bytes::copy_from_slice(&src[..vlen]);
            src.advance(vlen);
            let slot = if Binary::is_valid_key(&key) {
                Slot::Binary(
                    MetadataKey::from_checked(key),
                    MetadataValue::from_checked(bytes),
                )
            } else if Ascii::is_valid_value(&bytes) {
                Slot::Ascii(
                    MetadataKey::from_checked(key),
                    MetadataValue::from_checked(bytes),
                )
            } else {
                return Err(Status::internal(format!(
                    "metadata {key:?} has a control character in its ASCII value"
                )));
            };
            map.slots.push(slot);
        }
        if src.has_remaining() {
            return Err(bad());
        }
        Ok(map)
    }
}
