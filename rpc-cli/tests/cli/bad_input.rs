//! Bad input: a one-line error naming what is wrong, and a non-zero exit status.

use crate::support::{fails, rdma_rpc, TestServer};

#[test]
fn unknown_method_is_named() {
    let server = TestServer::start(true);
    let run = rdma_rpc(&["call", &server.addr, "helloworld.Greeter/Nope", "{}"], "");
    fails(
        run,
        1,
        "error: unknown method Nope of service helloworld.Greeter (methods: SayHello)",
    );
}

#[test]
fn unknown_service_is_named() {
    let server = TestServer::start(true);
    let run = rdma_rpc(
        &["call", &server.addr, "helloworld.Nobody/SayHello", "{}"],
        "",
    );
    fails(
        run,
        1,
        "error: unknown service helloworld.Nobody \
         (services: helloworld.Greeter, kv.KeyValue, routeguide.RouteGuide)",
    );
    let run = rdma_rpc(&["list", &server.addr, "nope.Nope"], "");
    fails(
        run,
        1,
        "error: unknown service nope.Nope \
         (services: helloworld.Greeter, kv.KeyValue, routeguide.RouteGuide)",
    );
    let run = rdma_rpc(&["describe", &server.addr, "nope.Nope"], "");
    fails(run, 1, "error: unknown symbol nope.Nope");
}

#[test]
fn malformed_json_is_named() {
    let server = TestServer::start(true);
    let run = rdma_rpc(
        &[
            "call",
            &server.addr,
            "helloworld.Greeter/SayHello",
            r#"{"name":"#,
        ],
        "",
    );
    fails(
        run,
        1,
        "error: the request is not valid JSON: EOF while parsing a value at line 1 column 8",
    );
    assert!(server.names().is_empty(), "a bad request was sent");
}

#[test]
fn wrong_field_type_names_the_field() {
    let server = TestServer::start(true);
    let run = rdma_rpc(
        &[
            "call",
            &server.addr,
            "helloworld.Greeter/SayHello",
            r#"{"name":5}"#,
        ],
        "",
    );
    fails(
        run,
        1,
        "error: the request is not a valid helloworld.HelloRequest: field name: \
         invalid type: integer `5`, expected a string at line 1 column 9",
    );
    let run = rdma_rpc(
        &[
            "call",
            &server.addr,
            "routeguide.RouteGuide/GetFeature",
            r#"{"latitude":1,"longitude":"west"}"#,
        ],
        "",
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .starts_with("error: the request is not a valid routeguide.Point: field longitude: "),
        "{run:?}"
    );
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
}

#[test]
fn a_bad_line_in_a_stream_is_named() {
    let server = TestServer::start(true);
    let notes = "{\"location\":{\"latitude\":1,\"longitude\":1},\"message\":\"a\"}\n\
                 {\"location\":{\"latitude\":\"north\"}}\n";
    let run = rdma_rpc(
        &["call", &server.addr, "routeguide.RouteGuide/RouteChat"],
        notes,
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.starts_with(
            "error: request 2 is not a valid routeguide.RouteNote: field location.latitude: "
        ),
        "{run:?}"
    );
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
}

#[test]
fn unreachable_address_is_named() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("rdma://127.0.0.1:{port}");
    let run = rdma_rpc(&["call", &addr, "helloworld.Greeter/SayHello", "{}"], "");
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .starts_with(&format!("error: cannot connect to {addr}: ")),
        "{run:?}"
    );
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    let run = rdma_rpc(&["list", "http://127.0.0.1:1"], "");
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .starts_with("error: \"http://127.0.0.1:1\" is not an address"),
        "{run:?}"
    );
}

#[test]
fn a_server_without_reflection_is_named() {
    let server = TestServer::start(false);
    let run = rdma_rpc(&["list", &server.addr], "");
    fails(
        run,
        1,
        &format!(
            "error: {} serves no reflection (grpc.reflection.v1 or v1alpha): \
             pass --proto or --protoset",
            server.addr
        ),
    );
}

#[test]
fn a_bad_template_is_named() {
    let server = TestServer::start(true);
    let run = rdma_rpc(
        &[
            "bench",
            &server.addr,
            "helloworld.Greeter/SayHello",
            "-d",
            r#"{"name":"{{.Nope}}"}"#,
        ],
        "",
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .starts_with("error: --data: unknown placeholder {{.Nope}}"),
        "{run:?}"
    );
    assert!(server.names().is_empty());
}
