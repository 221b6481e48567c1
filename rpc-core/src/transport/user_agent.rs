//! tonic's `Endpoint::user_agent`: a `user-agent` metadata entry on every call of
//! the channel, `"<yours> rdma-rpc/<version>"`, where tonic sends the header.

use crate::metadata::{Ascii, MetadataMap, MetadataValue};

/// This crate's part of the user agent (tonic's is `tonic/<version>`).
const OURS: &str = concat!("rdma-rpc/", env!("CARGO_PKG_VERSION"));

/// What the endpoint's `user_agent(ua)` sends: `ua` followed by this crate's part;
/// `None` if `ua` is not a valid metadata value.
pub(crate) fn value(ua: &str) -> Option<MetadataValue<Ascii>> {
    format!("{ua} {OURS}").parse().ok()
}

/// Puts `ua` on a call's metadata; a `user-agent` the call already carries comes
/// first, as tonic appends its own to one a request sets.
pub(crate) fn tag(metadata: &mut MetadataMap, ua: &MetadataValue<Ascii>) {
    let joined = metadata
        .get("user-agent")
        .and_then(|own| own.to_str().ok())
        .and_then(|own| ua.to_str().ok().map(|ua| format!("{own} {ua}")))
        .and_then(|s| s.parse().ok());
    metadata.insert("user-agent", joined.unwrap_or_else(|| ua.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_names_the_user_then_this_crate() {
        let v = value("Greeter/2").unwrap();
        assert_eq!(v.to_str().unwrap(), format!("Greeter/2 {OURS}"));
        assert!(value("bad\nvalue").is_none());
    }

    #[test]
    fn a_calls_own_user_agent_comes_first() {
        let ua = value("Greeter").unwrap();
        let mut md = MetadataMap::new();
        tag(&mut md, &ua);
        assert_eq!(md.get("user-agent").unwrap(), &ua);
        let mut md = MetadataMap::new();
        md.insert("user-agent", "probe/1".parse().unwrap());
        tag(&mut md, &ua);
        assert_eq!(
            md.get("user-agent").unwrap().to_str().unwrap(),
            format!("probe/1 Greeter {OURS}")
        );
        assert_eq!(md.get_all("user-agent").iter().count(), 1);
    }
}
