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
    let err = rpc_codegen::configure()
        .compile_protos(&["../proto/echo.proto"], &["../proto"])
        .unwrap_err();
    assert!(err.to_string().contains("OUT_DIR"), "{err}");
}

#[test]
fn the_one_argument_compile_protos_includes_the_proto_s_directory() {
    // The import of a sibling file resolves, so the failure is the missing OUT_DIR
    // (this binary has none), not the import.
    let err = rpc_codegen::compile_protos("tests/protos/sibling/greeting.proto").unwrap_err();
    assert!(err.to_string().contains("OUT_DIR"), "{err}");
    let err = rpc_codegen::compile_protos("tests/protos/sibling/absent.proto").unwrap_err();
    assert!(err.to_string().contains("absent.proto"), "{err}");
}

#[test]
fn a_tonic_prost_build_script_s_protoc_arg_and_empty_includes_build() {
    // tonic-prost-build's signature: one path type for both lists, so `&[]` infers.
    let _empty_includes = || rpc_codegen::configure().compile_protos(&["a.proto"], &[]);
    let out = generate(
        "protoc_arg",
        rpc_codegen::configure().protoc_arg("--experimental_allow_proto3_optional"),
        "../proto/kv.proto",
        "kv",
    );
    assert!(out.contains("pub mod key_value_client"));
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
        .compile_well_known_types(true)
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
        rpc_codegen::configure().disable_comments([".kv.KeyValue.Scan", ".kv.GetRequest"]),
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
        rpc_codegen::configure().disable_comments(["kv"]),
        "../proto/kv.proto",
        "kv",
    );
    assert!(
        !file.contains("/// A key-value store with byte-string keys"),
        "{file}"
    );
    assert!(!file.contains("/// Reads the value"), "{file}");
}

#[test]
fn without_codegen_path_the_crate_s_manifest_is_asked() {
    // rpc-codegen's own manifest (this test's CARGO_MANIFEST_DIR) has no rpc-core
    // dependency: generated code falls back to `::rpc_core`.
    let file = generate(
        "fallback",
        rpc_codegen::configure(),
        "../proto/helloworld.proto",
        "helloworld",
    );
    assert!(file.contains("::rpc_core::codegen::Grpc<T>"), "{file}");
}

#[test]
fn emit_package_false_routes_on_the_bare_service_name() {
    let file = generate(
        "no_package",
        rpc_codegen::configure().emit_package(false),
        "../proto/helloworld.proto",
        "helloworld",
    );
    assert!(file.contains("\"/Greeter/SayHello\""), "{file}");
    assert!(file.contains("SERVICE_NAME: &str = \"Greeter\""), "{file}");
    assert!(!file.contains("/helloworld.Greeter/"), "{file}");
}

#[test]
fn proto_path_moves_where_services_find_messages() {
    let file = generate(
        "proto_path",
        rpc_codegen::configure().proto_path("crate::pb"),
        "../proto/helloworld.proto",
        "helloworld",
    );
    assert!(file.contains("Response<crate::pb::HelloReply>"), "{file}");
}

#[test]
fn struct_and_trait_attributes_reach_their_items() {
    let file = generate(
        "struct_attrs",
        rpc_codegen::configure()
            .client_attribute("helloworld", "#[doc(alias = \"c\")]")
            .server_attribute("helloworld.Greeter", "#[doc(alias = \"s\")]")
            .trait_attribute(".", "#[doc(alias = \"t\")]"),
        "../proto/helloworld.proto",
        "helloworld",
    );
    let before = |attr: &str, item: &str| {
        let at = file
            .find(attr)
            .unwrap_or_else(|| panic!("{attr} missing: {file}"));
        let next = file[at..].find("pub ").unwrap() + at;
        assert!(
            file[next..].starts_with(item),
            "{attr} is not on {item}: {file}"
        );
    };
    before("#[doc(alias = \"c\")]", "pub struct GreeterClient");
    before("#[doc(alias = \"s\")]", "pub struct GreeterServer");
    before("#[doc(alias = \"t\")]", "pub trait Greeter");
}

#[test]
fn build_transport_false_leaves_out_connect() {
    let with = generate(
        "transport",
        rpc_codegen::configure(),
        "../proto/helloworld.proto",
        "helloworld",
    );
    assert!(with.contains("pub async fn connect<D>"), "{with}");
    let without = generate(
        "no_transport",
        rpc_codegen::configure().build_transport(false),
        "../proto/helloworld.proto",
        "helloworld",
    );
    assert!(!without.contains("fn connect"), "{without}");
    assert!(without.contains("pub fn new(inner: T)"), "{without}");
}

#[test]
fn a_file_descriptor_set_is_written_when_asked() {
    use prost::Message;

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rpc-codegen-builder/fds");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join("descriptor.bin");
    rpc_codegen::configure()
        .file_descriptor_set_path(&path)
        .out_dir(&dir)
        .compile_protos(&["wkt.proto"], &["tests/protos"])
        .unwrap();
    let fds = prost_types::FileDescriptorSet::decode(&*fs::read(&path).unwrap()).unwrap();
    let names: Vec<_> = fds.file.iter().map(|f| f.name()).collect();
    assert!(names.contains(&"wkt.proto"), "{names:?}");
    assert!(
        names.contains(&"google/protobuf/timestamp.proto"),
        "{names:?}"
    );
}

#[test]
fn compile_with_config_keeps_the_caller_s_prost_options_and_adds_the_builder_s() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rpc-codegen-builder/with_config");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let mut config = prost_build::Config::new();
    config.type_attribute(".helloworld.HelloRequest", "#[derive(PartialOrd)]");
    rpc_codegen::configure()
        .type_attribute(".helloworld.HelloReply", "#[derive(Hash)]")
        .out_dir(&dir)
        .compile_with_config(config, &["../proto/helloworld.proto"], &["../proto"])
        .unwrap();
    let file = fs::read_to_string(dir.join("helloworld.rs")).unwrap();
    assert!(
        file.contains("#[derive(PartialOrd)]\n#[derive(Clone, PartialEq, Eq, Hash, ::prost::Message)]\npub struct HelloRequest"),
        "{file}"
    );
    assert!(file.contains("#[derive(Hash)]\n#[derive(Clone, PartialEq, Eq, Hash, ::prost::Message)]\npub struct HelloReply"), "{file}");
}
