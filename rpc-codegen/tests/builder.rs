//! Builder options, seen in the generated file.

use std::fs;
use std::path::PathBuf;

fn generate(test: &str, builder: rpc_codegen::Builder, proto: &str, package: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("rpc-codegen-builder")
        .join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    builder
        .out_dir(&dir)
        .compile_protos(&[proto], &["../proto", "tests/protos"])
        .unwrap();
    fs::read_to_string(dir.join(format!("{package}.rs"))).unwrap()
}

#[test]
fn compile_protos_without_out_dir_outside_a_build_script_says_why() {
    // This test binary has no OUT_DIR (rpc-codegen has no build script).
    let err = rpc_codegen::compile_protos(&["../proto/echo.proto"], &["../proto"]).unwrap_err();
    assert!(err.to_string().contains("OUT_DIR"), "{err}");
}

#[test]
fn client_only_and_server_only() {
    let client = generate(
        "client",
        rpc_codegen::configure().build_server(false),
        "../proto/kv.proto",
        "kv",
    );
    assert!(client.contains("pub mod key_value_client"));
    assert!(!client.contains("pub mod key_value_server"));
    let server = generate(
        "server",
        rpc_codegen::configure().build_client(false),
        "../proto/kv.proto",
        "kv",
    );
    assert!(!server.contains("pub mod key_value_client"));
    assert!(server.contains("pub mod key_value_server"));
}

#[test]
fn attributes_reach_messages_and_service_modules() {
    let file = generate(
        "attrs",
        rpc_codegen::configure()
            .type_attribute(".helloworld.HelloRequest", "#[derive(PartialOrd)]")
            .client_mod_attribute("helloworld", "#[cfg(feature = \"client\")]")
            .server_mod_attribute("helloworld.Greeter", "#[cfg(feature = \"server\")]"),
        "../proto/helloworld.proto",
        "helloworld",
    );
    assert!(
        file.contains("#[derive(PartialOrd)]\n#[derive(Clone, PartialEq, Eq, Hash, ::prost::Message)]\npub struct HelloRequest"),
        "{file}"
    );
    assert!(
        file.contains("#[cfg(feature = \"client\")]\npub mod greeter_client"),
        "{file}"
    );
    assert!(
        file.contains("#[cfg(feature = \"server\")]\npub mod greeter_server"),
        "{file}"
    );
}

#[test]
fn well_known_types_come_from_prost_types_unless_overridden() {
    let default = generate("wkt_default", rpc_codegen::configure(), "wkt.proto", "wkt");
    assert!(default.contains("::prost_types::Timestamp"), "{default}");
    assert!(
        default.contains("Response<::prost_types::Timestamp>"),
        "{default}"
    );

    let moved = generate(
        "wkt_moved",
        rpc_codegen::configure().prost_types_path("::my_types"),
        "wkt.proto",
        "wkt",
    );
    assert!(moved.contains("Response<::my_types::Timestamp>"), "{moved}");
    assert!(!moved.contains("prost_types"), "{moved}");
}

#[test]
fn extern_paths_and_codegen_path() {
    let file = generate(
        "extern",
        rpc_codegen::configure()
            .extern_path(".helloworld.HelloReply", "::shared::Reply")
            .codegen_path("::my_rpc::codegen"),
        "../proto/helloworld.proto",
        "helloworld",
    );
    assert!(!file.contains("pub struct HelloReply"), "{file}");
    assert!(file.contains("Response<::shared::Reply>"), "{file}");
    assert!(file.contains("::my_rpc::codegen::Grpc<T>"), "{file}");
    assert!(!file.contains("rpc_core"), "{file}");
}

#[test]
fn compiled_well_known_types_are_referred_to_by_package() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rpc-codegen-builder/wkt_compiled");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    rpc_codegen::configure()
        .compile_well_known_types()
        .out_dir(&dir)
        .compile_protos(&["wkt.proto"], &["tests/protos"])
        .unwrap();
    let wkt = fs::read_to_string(dir.join("wkt.rs")).unwrap();
    assert!(
        wkt.contains("Response<super::super::google::protobuf::Timestamp>"),
        "{wkt}"
    );
    let google = fs::read_to_string(dir.join("google.protobuf.rs")).unwrap();
    assert!(google.contains("pub struct Timestamp"));
}

#[test]
fn comments_can_be_disabled_for_services_and_methods() {
    let file = generate(
        "no_comments",
        rpc_codegen::configure().disable_comments(&[".kv.KeyValue.Scan", ".kv.GetRequest"]),
        "../proto/kv.proto",
        "kv",
    );
    assert!(!file.contains("Lists entries in key order"), "{file}");
    assert!(file.contains("/// Calls `/kv.KeyValue/Scan`."), "{file}");
    assert!(
        file.contains("/// Reads the value stored under a key."),
        "{file}"
    );
    assert!(
        file.contains("/// A key-value store with byte-string keys"),
        "{file}"
    );

    let file = generate(
        "no_service_comments",
        rpc_codegen::configure().disable_comments(&["kv"]),
        "../proto/kv.proto",
        "kv",
    );
    assert!(
        !file.contains("/// A key-value store with byte-string keys"),
        "{file}"
    );
    assert!(!file.contains("/// Reads the value"), "{file}");
}
