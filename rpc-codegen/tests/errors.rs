//! What a build script sees when generation cannot succeed.

use std::fs;
use std::path::PathBuf;

/// A fresh, empty output directory for one test.
fn out_dir(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("rpc-codegen-errors")
        .join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn compile(test: &str, proto: &str) -> (std::io::Error, PathBuf) {
    let dir = out_dir(test);
    let err = rpc_codegen::configure()
        .out_dir(&dir)
        .compile_protos(&[format!("tests/protos/{proto}")], &["tests/protos"])
        .expect_err("generation must fail");
    (err, dir)
}

fn is_empty(dir: &PathBuf) -> bool {
    fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn a_server_streaming_method_fails_naming_the_method_and_writes_nothing() {
    let (err, dir) = compile("server_streaming", "streaming.proto");
    let msg = err.to_string();
    assert!(msg.contains("`stream.Clock/Subscribe`"), "{msg}");
    assert!(msg.contains("server-streaming"), "{msg}");
    assert!(msg.contains("not supported yet"), "{msg}");
    assert!(!msg.contains("Now"), "the unary method is fine: {msg}");
    assert!(is_empty(&dir), "no half-generated output");
}

#[test]
fn every_streaming_method_is_reported_with_its_kind() {
    let (err, _) = compile("client_streaming", "client_streaming.proto");
    let msg = err.to_string();
    assert!(
        msg.contains("`upload.Uploader/Upload` is client-streaming"),
        "{msg}"
    );
    assert!(
        msg.contains("`upload.Uploader/Chat` is bidirectional-streaming"),
        "{msg}"
    );
}

#[test]
fn streaming_methods_do_not_matter_when_no_service_code_is_generated() {
    let dir = out_dir("messages_only");
    rpc_codegen::configure()
        .out_dir(&dir)
        .build_client(false)
        .build_server(false)
        .compile_protos(&["tests/protos/streaming.proto"], &["tests/protos"])
        .expect("messages only");
    let generated = fs::read_to_string(dir.join("stream.rs")).unwrap();
    assert!(generated.contains("pub struct Tick"));
    assert!(!generated.contains("clock_client"));
}

#[test]
fn methods_that_map_to_one_rust_name_are_an_error_naming_both() {
    let (err, _) = compile("clash", "clash.proto");
    let msg = err.to_string();
    assert!(
        msg.contains("methods `GetFoo` and `get_foo` of service `clash.Twins`"),
        "{msg}"
    );
}

#[test]
fn a_syntax_error_names_the_file_and_line() {
    let (err, _) = compile("broken", "broken.proto");
    let msg = err.to_string();
    assert!(msg.contains("broken.proto:7:"), "{msg}");
}

#[test]
fn a_missing_file_is_an_error() {
    let (err, _) = compile("missing", "does_not_exist.proto");
    assert!(err.to_string().contains("does_not_exist.proto"), "{err}");
}
