//! A tonic program ports by its Cargo.toml alone: `porting/tonic-helloworld`, tonic's
//! helloworld written against `tonic::` paths, depends on rpc-core as `tonic` and on
//! rpc-codegen as `tonic-build` (its `build.rs` is `tonic_build::compile_protos(..)`).
//! It is a crate of its own outside the workspace, as a user's would be; this test
//! builds and runs it with cargo and checks what it prints. That it builds at all
//! shows the generated code found rpc-core under the name `tonic` by itself: the
//! crate has no `rpc_core`.

use std::path::Path;
use std::process::Command;

#[test]
fn tonic_helloworld_builds_and_runs_with_rpc_core_as_tonic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace");
    let manifest = root.join("porting/tonic-helloworld/Cargo.toml");
    // The workspace's target directory (CARGO_TARGET_TMPDIR is `<target>/tmp`):
    // the dependencies it has built already are not built again.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target directory");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    let output = Command::new(&cargo)
        .arg("run")
        .arg("--manifest-path")
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo:?} (is cargo installed?): {e}"));

    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "cargo run --manifest-path {} failed ({}):\n{stdout}\n{stderr}",
        manifest.display(),
        output.status
    );
    let mut lines = stdout.lines();
    let listening = lines.next().unwrap_or_default();
    assert!(
        listening.starts_with("GreeterServer listening on 127.0.0.1:"),
        "{stdout}"
    );
    let response = lines.next().unwrap_or_default();
    assert!(response.starts_with("RESPONSE=Response {"), "{stdout}");
    assert!(
        response.contains(r#"message: HelloReply { message: "Hello Tonic!" }"#),
        "{stdout}"
    );
    assert_eq!(lines.next(), None, "nothing else: {stdout}");
}
