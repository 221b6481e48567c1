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
        .compile_protos(
            &[format!("tests/protos/{proto}")],
            &["tests/protos".to_string()],
        )
        .expect_err("generation must fail");
    (err, dir)
}

fn is_empty(dir: &PathBuf) -> bool {
    fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn methods_that_map_to_one_rust_name_are_an_error_naming_both() {
    let (err, dir) = compile("clash", "clash.proto");
    let msg = err.to_string();
    assert!(
        msg.contains("methods `GetFoo` and `get_foo` of service `clash.Twins`"),
        "{msg}"
    );
    assert!(is_empty(&dir), "no half-generated output");
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
