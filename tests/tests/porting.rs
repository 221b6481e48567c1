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

/// Runs `cargo run` on the out-of-workspace crate `porting/<name>`, in the
/// workspace's target directory, and returns what it printed; fails the test, with
/// its output, if it does not build or exits non-zero.
fn run_port(name: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace");
    let manifest = root.join("porting").join(name).join("Cargo.toml");
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
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "cargo run --manifest-path {} failed ({}):\n{stdout}\n{stderr}",
        manifest.display(),
        output.status
    );
    stdout
}

/// `porting/tonic-routeguide`: a tonic route guide using all four call shapes
/// (`tokio_stream`, `async_stream`, `tonic::Streaming`), built with rpc-core as
/// `tonic` and rpc-codegen as `tonic-build`, prints every answer of every shape.
#[test]
fn tonic_routeguide_builds_and_runs_all_four_shapes_with_rpc_core_as_tonic() {
    let stdout = run_port("tonic-routeguide");
    let mut lines = stdout.lines();
    let mut next = || lines.next().unwrap_or_default().to_owned();
    assert!(
        next().starts_with("RouteGuideServer listening on: 127.0.0.1:"),
        "{stdout}"
    );
    assert_eq!(next(), "*** SIMPLE RPC ***", "{stdout}");
    let response = next();
    assert!(response.starts_with("RESPONSE = Response {"), "{stdout}");
    assert!(
        response.contains(
            r#"message: Feature { name: "Berkshire Valley Management Area Trail", location: Some(Point { latitude: 409146138, longitude: -746188906 }) }"#
        ),
        "{stdout}"
    );
    assert_eq!(next(), "", "{stdout}");
    assert_eq!(next(), "*** SERVER STREAMING ***", "{stdout}");
    // Every feature of data/route_guide_db.json inside the rectangle, in file order.
    for (name, latitude, longitude) in [
        ("Harbour light, Shore Road", 407838351, -746143763),
        ("Old mill, Creek Lane", 408122808, -743999179),
        ("Ridge trail head", 413628156, -749015468),
        ("Ferry pier", 419999544, -740371136),
        ("Summit cairn", 414008389, -743951297),
        (
            "Berkshire Valley Management Area Trail",
            409146138,
            -746188906,
        ),
        ("", 402948455, -747903913),
    ] {
        assert_eq!(
            next(),
            format!(
                "FEATURE = Feature {{ name: {name:?}, location: Some(Point {{ latitude: \
                 {latitude}, longitude: {longitude} }}) }}"
            ),
            "{stdout}"
        );
    }
    assert_eq!(next(), "", "{stdout}");
    assert_eq!(next(), "*** CLIENT STREAMING ***", "{stdout}");
    assert_eq!(next(), "Traversing 4 points", "{stdout}");
    assert!(
        next().starts_with(
            "SUMMARY: RouteSummary { point_count: 4, feature_count: 3, distance: 93336, "
        ),
        "{stdout}"
    );
    assert_eq!(next(), "", "{stdout}");
    assert_eq!(next(), "*** BIDIRECTIONAL STREAMING ***", "{stdout}");
    // Each note answered with every note taken at its place so far.
    for (i, latitude) in [
        (0, 409146138),
        (1, 409146139),
        (0, 409146138),
        (2, 409146138),
        (1, 409146139),
        (3, 409146139),
    ] {
        assert_eq!(
            next(),
            format!(
                "NOTE = RouteNote {{ location: Some(Point {{ latitude: {latitude}, longitude: \
                 -746188906 }}), message: \"note {i}\" }}"
            ),
            "{stdout}"
        );
    }
    assert_eq!(next(), "", "nothing else: {stdout}");
}

/// `porting/tonic-parity`: a tonic 0.14 client and server using every item of issue
/// 13's Build 2-8 (interceptors with a bearer token, `from_static`, `connect_lazy`
/// before the server is up, a server layer, `Server::timeout`, `remote_addr`,
/// extensions, an error's details and metadata, health `Check`, a channel timeout
/// under a request's, size limits each way, `serve_with_shutdown` from a call),
/// written against `tonic::`/`tonic_health::` paths, built with rpc-core as `tonic`,
/// rpc-codegen as `tonic-build` and rpc-health as `tonic-health`. Its transcript,
/// line by line.
#[test]
fn tonic_parity_pair_builds_and_prints_its_transcript() {
    let stdout = run_port("tonic-parity");
    let expected = [
        "from_static, nothing there: Unavailable",
        "connect_lazy, no server yet: Unavailable",
        "after the server started: Hello Tonic (token-holder, from 127.0.0.1)",
        "no token: Unauthenticated no token",
        r#"error: InvalidArgument "name must not be empty" details=detail-bytes x-reason=empty-name"#,
        "request over the server's decoding limit: OutOfRange",
        "reply over the client's decoding limit: OutOfRange",
        "request over the client's encoding limit: Internal",
        "reply over the server's encoding limit: OutOfRange",
        "channel timeout 300 ms under a 5 s request (tonic: Cancelled): DeadlineExceeded",
        "Server::timeout 500 ms under a 5 s request (tonic: Cancelled): DeadlineExceeded",
        "health overall: Serving",
        "health parity.Parity: Serving",
        "health parity.Parity after set_not_serving: NotServing",
        "health parity.Parity after set_service_status: Serving",
        "health unknown.Service: NotFound",
        "shutdown call: stopping",
        "server stopped; the layer counted 14 calls",
    ];
    let lines: Vec<&str> = stdout.lines().collect();
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(
            lines.get(i).copied(),
            Some(*want),
            "line {}:\n{stdout}",
            i + 1
        );
    }
    assert_eq!(lines.len(), expected.len(), "nothing else:\n{stdout}");
}
