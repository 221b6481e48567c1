//! Conversions with `http::HeaderMap`, as tonic's `MetadataMap::from_headers` and
//! `into_headers`: for code that carries metadata through HTTP headers (context
//! propagation, a gateway). Binary (`-bin`) values are base64 in headers, as in
//! gRPC's HTTP/2 mapping.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::base64;
use super::encoding::{Ascii, Binary, ValueEncoding};
use super::key::MetadataKey;
use super::map::{MetadataMap, Slot};
use super::value::MetadataValue;

impl MetadataMap {
    /// The entries of `headers`, in their order. A `-bin` header's base64 value
    /// (padded or not) is decoded. Left out, and logged at debug: a name that is
    /// not a gRPC key, a `-bin` value that is not base64, an ASCII value with a
    /// control character.
    pub fn from_headers(headers: HeaderMap) -> Self {
        let mut map = MetadataMap::with_capacity(headers.len());
        for (name, value) in &headers {
            if !map.add_header(name.as_str(), value.as_bytes()) {
                tracing::debug!(header = %name, "not a metadata entry; left out");
            }
        }
        map
    }

    /// Adds one header's entry; whether it was one.
    fn add_header(&mut self, name: &str, value: &[u8]) -> bool {
        if Binary::is_valid_key(name) {
            let (Ok(key), Some(raw)) = (
                MetadataKey::<Binary>::from_bytes(name.as_bytes()),
                base64::decode(value),
            ) else {
                return false;
            };
            self.add(key, MetadataValue::from_bytes(&raw));
            return true;
        }
        match (
            MetadataKey::<Ascii>::from_bytes(name.as_bytes()),
            MetadataValue::<Ascii>::try_from(value),
        ) {
            (Ok(key), Ok(v)) => {
                self.add(key, v);
                true
            }
            _ => false,
        }
    }

    /// The entries as HTTP headers, in their order; binary values base64-encoded
    /// without padding, as gRPC sends them.
    pub fn into_headers(self) -> HeaderMap {
        let mut headers = HeaderMap::with_capacity(self.slots.len());
        for slot in self.slots {
            let (name, value) = match &slot {
                Slot::Ascii(k, v) => (k.as_str(), v.raw().clone()),
                Slot::Binary(k, v) => (k.as_str(), Bytes::from(base64::encode(v.raw()))),
            };
            // gRPC keys and HTTP field values (checked when the entry was made)
            // are valid header names and values.
            let name =
                HeaderName::from_bytes(name.as_bytes()).expect("a gRPC key is a header name");
            let value =
                HeaderValue::from_maybe_shared(value).expect("a metadata value is a field value");
            headers.append(name, value);
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_metadata_convert_both_ways() {
        let mut headers = HeaderMap::new();
        headers.append("x-trace", HeaderValue::from_static("abc"));
        headers.append("x-tag", HeaderValue::from_static("1"));
        headers.append("x-tag", HeaderValue::from_static("2"));
        headers.append("trace-bin", HeaderValue::from_static("AAEC")); // [0, 1, 2]
        headers.append("bad-bin", HeaderValue::from_static("***"));
        let map = MetadataMap::from_headers(headers);
        assert_eq!(map.get("x-trace").unwrap(), "abc");
        assert_eq!(map.get_all("x-tag").iter().collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(
            map.get_bin("trace-bin").unwrap().to_bytes().unwrap(),
            &[0u8, 1, 2][..]
        );
        assert!(map.get_bin("bad-bin").is_none(), "not base64: left out");
        let back = map.into_headers();
        assert_eq!(back.get("x-trace").unwrap(), "abc");
        assert_eq!(back.get_all("x-tag").iter().count(), 2);
        assert_eq!(back.get("trace-bin").unwrap(), "AAEC");
    }
}
