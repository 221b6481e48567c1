//! `call` of unary methods: JSON in and out, metadata, deadlines, error statuses.

use crate::support::{fails, ok, proto, rdma_rpc, TestServer};

#[test]
fn call_prints_the_reply_as_json() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(
        &[
            "call",
            &server.addr,
            "helloworld.Greeter/SayHello",
            r#"{"name":"Ada"}"#,
        ],
        "",
    ));
    assert_eq!(out, "{\"message\":\"Hello Ada!\"}\n");
    assert_eq!(server.names(), ["Ada"]);
}

#[test]
fn call_reads_the_request_from_standard_input() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(
        &["call", &server.addr, "helloworld.Greeter.SayHello"],
        "{\"name\": \"Grace\"}\n",
    ));
    assert_eq!(out, "{\"message\":\"Hello Grace!\"}\n");
}

#[test]
fn header_metadata_reaches_the_server() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(
        &[
            "call",
            &server.addr,
            "helloworld.Greeter/SayHello",
            r#"{"name":"Ada"}"#,
            "-H",
            "X-Who: the test",
        ],
        "",
    ));
    assert_eq!(out, "{\"message\":\"Hello Ada! (asked by the test)\"}\n");
}

#[test]
fn timeout_ends_the_call_deadline_exceeded() {
    let server = TestServer::start(true);
    let run = rdma_rpc(
        &[
            "call",
            &server.addr,
            "helloworld.Greeter/SayHello",
            r#"{"name":"never"}"#,
            "--timeout",
            "300ms",
        ],
        "",
    );
    assert_eq!(run.code, 64 + 4, "{run:?}");
    assert!(
        run.stderr.starts_with("error: DEADLINE_EXCEEDED: "),
        "{run:?}"
    );
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    assert_eq!(run.stdout, "");
}

#[test]
fn an_error_status_is_printed_and_sets_the_exit_status() {
    let server = TestServer::start(true);
    let run = rdma_rpc(
        &["call", &server.addr, "helloworld.Greeter/SayHello", "{}"],
        "",
    );
    fails(
        run,
        64 + 3,
        "error: INVALID_ARGUMENT: name must not be empty",
    );
}

#[test]
fn call_with_a_proto_file_needs_no_reflection() {
    let server = TestServer::start(false);
    let out = ok(rdma_rpc(
        &[
            "call",
            &server.addr,
            "kv.KeyValue/Put",
            r#"{"key":"YQ==","value":"Yg=="}"#,
            "--proto",
            &proto("kv.proto"),
            "--import-path",
            &proto(""),
        ],
        "",
    ));
    assert_eq!(out, "{}\n");
    let out = ok(rdma_rpc(
        &[
            "call",
            &server.addr,
            "kv.KeyValue/Get",
            r#"{"key":"YQ=="}"#,
            "--proto",
            &proto("kv.proto"),
        ],
        "",
    ));
    assert_eq!(out, "{\"value\":\"Yg==\"}\n");
}

#[test]
fn call_with_a_protoset() {
    let server = TestServer::start(false);
    let dir = std::env::temp_dir().join(format!("rdma-rpc-cli-protoset-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let set = dir.join("examples.protoset");
    std::fs::write(&set, examples::FILE_DESCRIPTOR_SET).expect("write protoset");
    let out = ok(rdma_rpc(
        &[
            "call",
            &server.addr,
            "routeguide.RouteGuide/GetFeature",
            r#"{"latitude":407838351,"longitude":-746143763}"#,
            "--protoset",
            set.to_str().expect("utf-8 path"),
        ],
        "",
    ));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        out,
        "{\"name\":\"Harbour light\",\"location\":{\"latitude\":407838351,\"longitude\":-746143763}}\n"
    );
}
