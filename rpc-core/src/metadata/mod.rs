//! Call metadata as tonic's `tonic::metadata`: ASCII and binary (`-bin`) key/value
//! pairs, in a [`MetadataMap`] that holds several values per key.
//!
//! The rules, and where they differ from tonic's (which are HTTP/2 header rules):
//!
//! * Keys are gRPC's lowercase `[0-9a-z_.-]`, 1 to 255 bytes; keys of binary values end
//!   in `-bin`. [`MetadataKey::from_bytes`] lowercases its input, as tonic's does;
//!   lookups by `&str` ignore ASCII case, as tonic's do. tonic accepts the other HTTP
//!   token characters (`!#$%&'*+^`|~`) and longer names; gRPC does not, and neither
//!   does this crate.
//! * ASCII values are any bytes but controls other than tab (`0x20..=0xff` except
//!   `0x7f`, and `\t`), as HTTP's; [`MetadataValue::to_str`] succeeds when every byte is
//!   visible ASCII or tab, [`MetadataValue::from_static`] panics unless so.
//! * Binary values are any bytes. They travel as they are (tonic base64-encodes them
//!   for HTTP/2), so the few tonic items that expose the base64 form exist here only
//!   for ASCII values (`as_encoded_bytes`, `AsRef<[u8]>`), except
//!   `Bytes::from(value)`, which gives the base64 text as tonic's does.
//! * The names gRPC reserves for its own headers (`te`, `content-type`,
//!   `grpc-message`, `grpc-message-type`, `grpc-status`, and `grpc-timeout`, which a
//!   call's frame carries) may be put in a map but are
//!   never sent, as tonic drops them from requests, responses and statuses.
//!
//! The wire encoding is `count:u16, (key_len:u8, key, value_len:u16, value)*`, big
//! endian, in the map's order ([`MetadataMap::encode`]).

mod base64;
mod encoding;
mod entry;
mod headers;
mod iter;
mod key;
mod key_arg;
mod map;
mod value;
mod wire;

pub use encoding::{Ascii, Binary};
pub use entry::{Entry, OccupiedEntry, VacantEntry, ValueDrain, ValueIterMut};
pub use iter::{
    GetAll, Iter, IterMut, KeyAndMutValueRef, KeyAndValueRef, KeyRef, Keys, ValueIter, ValueRef,
    ValueRefMut, Values, ValuesMut,
};
pub use key::{AsciiMetadataKey, BinaryMetadataKey, MetadataKey};
pub use map::MetadataMap;
pub use value::{AsciiMetadataValue, BinaryMetadataValue, MetadataValue};

/// Default limit of one call's encoded metadata, as gRPC's default header list size.
pub const DEFAULT_METADATA_LIMIT: usize = 8 * 1024;

/// The errors of building keys and values, as tonic's `metadata::errors`.
pub mod errors {
    pub use super::key::InvalidMetadataKey;
    pub use super::value::{InvalidMetadataValue, InvalidMetadataValueBytes, ToStrError};
}

#[cfg(test)]
mod tests;
