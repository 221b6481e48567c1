//! How proto names become Rust names in generated service code.
//!
//! prost-build has already turned the proto names into Rust ones (`Service::name` is
//! UpperCamel, `Method::name` is snake_case with keywords escaped as `r#type` or
//! `self_`), so what is left here is what only service code needs: module and struct
//! names, call paths, message type paths, and the one renaming rule for client methods.

use heck::ToSnakeCase;
use proc_macro2::Ident;

/// Names of the generated client's own methods (`max_*_message_size` as tonic's),
/// plus `clone` (the client is `Clone`,
/// and an inherent `clone(&mut self, request)` would shadow `Clone::clone` at every
/// call site). An RPC whose Rust name is one of these gets a trailing underscore on
/// the client only (`Connect` → `connect_`), prost's rule for names that cannot be raw
/// identifiers (`self` → `self_`). The server trait keeps the plain name: it has no
/// helpers of its own to clash with.
pub(crate) const CLIENT_RESERVED: &[&str] = &[
    "connect",
    "new",
    "clone",
    "max_decoding_message_size",
    "max_encoding_message_size",
    "send_compressed",
    "accept_compressed",
    "with_interceptor",
];

/// Rust types prost-build maps some well-known types to (`google.protobuf.Empty` →
/// `()`, `Int32Value` → `i32`, ...): they are used as they are, not as `super::` paths.
const BUILTIN_TYPES: &[&str] = &["()", "bool", "f32", "f64", "i32", "i64", "u32", "u64"];

/// `greeter` for the service `Greeter`: the stem of `greeter_client`/`greeter_server`.
pub(crate) fn module_stem(service_rust_name: &str) -> String {
    service_rust_name.trim_start_matches("r#").to_snake_case()
}

/// `package.Service`, or `Service` in a file without a package.
pub(crate) fn full_service_name(package: &str, service_proto_name: &str) -> String {
    if package.is_empty() {
        service_proto_name.to_owned()
    } else {
        format!("{package}.{service_proto_name}")
    }
}

/// `/package.Service/Method`: what the client sends and the server routes on.
pub(crate) fn method_path(full_service_name: &str, method_proto_name: &str) -> String {
    format!("/{full_service_name}/{method_proto_name}")
}

/// Whether a builder path (`.` for everything, `.pkg` or `pkg` for a package and
/// its subpackages, `pkg.Service`, `pkg.Service.Method`; the leading dot optional,
/// as in prost-build's paths) matches the fully qualified `name`.
pub(crate) fn path_matches(path: &str, name: &str) -> bool {
    let path = path.trim_start_matches('.');
    path.is_empty()
        || name == path
        || name
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// The client method name for an RPC whose Rust name is `name` (see [`CLIENT_RESERVED`]).
pub(crate) fn client_method_name(name: &str) -> String {
    if CLIENT_RESERVED.contains(&name) {
        format!("{name}_")
    } else {
        name.to_owned()
    }
}

/// Parses an identifier prost-build produced, raw forms (`r#type`) included.
pub(crate) fn ident(name: &str) -> Result<Ident, String> {
    syn::parse_str::<Ident>(name).map_err(|e| format!("`{name}` is not a Rust identifier: {e}"))
}

/// The path of a request or response type as seen from inside a generated
/// `*_client`/`*_server` module, whose messages are at `proto_path` (`super`, the
/// package's module, unless the builder says otherwise). prost-build gives paths
/// relative to the package module (`HelloRequest`, `super::other::Msg`), absolute
/// ones for extern types (`::prost_types::Timestamp`), or builtin types.
pub(crate) fn message_type(rust_type: &str, proto_path: &str) -> Result<syn::Type, String> {
    let path = if rust_type.starts_with("::")
        || rust_type.starts_with("crate::")
        || BUILTIN_TYPES.contains(&rust_type)
    {
        rust_type.to_owned()
    } else {
        format!("{proto_path}::{rust_type}")
    };
    syn::parse_str(&path).map_err(|e| format!("`{path}` is not a Rust type: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;

    fn ty(s: &str) -> String {
        message_type(s, "super")
            .unwrap()
            .to_token_stream()
            .to_string()
            .replace(' ', "")
    }

    #[test]
    fn module_stems_match_tonic() {
        assert_eq!(module_stem("Greeter"), "greeter");
        assert_eq!(module_stem("KeyValue"), "key_value");
        assert_eq!(module_stem("HttpServer"), "http_server");
    }

    #[test]
    fn paths_with_and_without_package() {
        let s = full_service_name("helloworld", "Greeter");
        assert_eq!(method_path(&s, "SayHello"), "/helloworld.Greeter/SayHello");
        assert_eq!(
            method_path(&full_service_name("", "Greeter"), "X"),
            "/Greeter/X"
        );
    }

    #[test]
    fn paths_match_whole_segments() {
        assert!(path_matches(".", "a.b.S"));
        assert!(path_matches(".a", "a.b.S"));
        assert!(path_matches("a.b.S", "a.b.S"));
        assert!(path_matches("a.b.S", "a.b.S.Method"));
        assert!(!path_matches("a.b.S", "a.b.Service"));
        assert!(!path_matches(".a.b", "a.bc.S"));
    }

    #[test]
    fn only_reserved_client_names_are_renamed() {
        assert_eq!(client_method_name("connect"), "connect_");
        assert_eq!(client_method_name("new"), "new_");
        assert_eq!(client_method_name("clone"), "clone_");
        assert_eq!(
            client_method_name("max_decoding_message_size"),
            "max_decoding_message_size_"
        );
        assert_eq!(client_method_name("ready"), "ready");
        assert_eq!(client_method_name("r#type"), "r#type");
    }

    #[test]
    fn message_types_are_resolved_from_the_child_module() {
        assert_eq!(ty("HelloRequest"), "super::HelloRequest");
        assert_eq!(ty("super::b::Msg"), "super::super::b::Msg");
        assert_eq!(ty("outer::Inner"), "super::outer::Inner");
        assert_eq!(ty("::prost_types::Timestamp"), "::prost_types::Timestamp");
        assert_eq!(ty("()"), "()");
        assert_eq!(ty("r#Self_"), "super::r#Self_");
        let elsewhere = message_type("HelloRequest", "crate::pb").unwrap();
        assert_eq!(
            elsewhere.to_token_stream().to_string().replace(' ', ""),
            "crate::pb::HelloRequest"
        );
    }

    #[test]
    fn raw_identifiers_parse() {
        assert_eq!(ident("r#type").unwrap().to_string(), "r#type");
        assert!(ident("not an ident").is_err());
    }
}
