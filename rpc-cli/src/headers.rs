//! `-H 'key: value'` request metadata, and metadata printed back.

use base64::Engine;
use rpc_core::metadata::{
    AsciiMetadataKey, BinaryMetadataKey, BinaryMetadataValue, KeyAndValueRef, MetadataMap,
};

use crate::fail::{local, Fail};

/// The metadata of `-H` arguments, each `key: value`; a key ending `-bin` takes a
/// base64 value (padded or not).
pub(crate) fn parse(headers: &[String]) -> Result<MetadataMap, Fail> {
    let mut metadata = MetadataMap::new();
    for header in headers {
        let (key, value) = header
            .split_once(':')
            .ok_or_else(|| local(format!("header {header:?} is not 'key: value'")))?;
        let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
        if key.ends_with("-bin") {
            let key: BinaryMetadataKey = key
                .parse()
                .map_err(|_| local(format!("header {header:?}: {key:?} is not a valid key")))?;
            let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(value.trim_end_matches('='))
                .map_err(|e| local(format!("header {header:?}: the value is not base64: {e}")))?;
            metadata.append_bin(key, BinaryMetadataValue::from_bytes(&bytes));
        } else {
            let key: AsciiMetadataKey = key
                .parse()
                .map_err(|_| local(format!("header {header:?}: {key:?} is not a valid key")))?;
            let value = value.parse().map_err(|_| {
                local(format!(
                    "header {header:?}: the value is not printable ASCII"
                ))
            })?;
            metadata.append(key, value);
        }
    }
    Ok(metadata)
}

/// Each entry as `(key, value)` text: binary values in base64.
pub(crate) fn printable(metadata: &MetadataMap) -> Vec<(String, String)> {
    metadata
        .iter()
        .map(|entry| match entry {
            KeyAndValueRef::Ascii(k, v) => (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            ),
            KeyAndValueRef::Binary(k, v) => (
                k.as_str().to_owned(),
                match v.to_bytes() {
                    Ok(bytes) => base64::engine::general_purpose::STANDARD.encode(bytes),
                    Err(_) => "(not valid base64)".to_owned(),
                },
            ),
        })
        .collect()
}
