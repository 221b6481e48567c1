//! `list` and `describe`, from reflection and from `--proto`.

use crate::support::{ok, proto, rdma_rpc, Reflection, TestServer};

#[test]
fn list_shows_the_services_reflection_advertises() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(&["list", &server.addr], ""));
    assert_eq!(
        out,
        "helloworld.Greeter\nkv.KeyValue\nrouteguide.RouteGuide\n"
    );
}

#[test]
fn list_asks_v1alpha_when_the_server_has_only_that() {
    let server = TestServer::start_with(Reflection::V1Alpha);
    let out = ok(rdma_rpc(&["list", &server.addr], ""));
    assert_eq!(
        out,
        "helloworld.Greeter\nkv.KeyValue\nrouteguide.RouteGuide\n"
    );
}

#[test]
fn list_of_a_service_shows_its_methods() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(
        &["list", &server.addr, "routeguide.RouteGuide"],
        "",
    ));
    assert_eq!(
        out,
        "routeguide.RouteGuide.GetFeature\nrouteguide.RouteGuide.ListFeatures\n\
         routeguide.RouteGuide.RecordRoute\nrouteguide.RouteGuide.RouteChat\n"
    );
}

#[test]
fn list_from_a_proto_file_needs_no_reflection() {
    let server = TestServer::start(false);
    let file = proto("helloworld.proto");
    let out = ok(rdma_rpc(&["list", &server.addr, "--proto", &file], ""));
    assert_eq!(out, "helloworld.Greeter\n");
}

#[test]
fn describe_prints_a_service_in_proto_syntax() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(
        &["describe", &server.addr, "routeguide.RouteGuide"],
        "",
    ));
    assert_eq!(
        out,
        "routeguide.RouteGuide is a service:\n\
         service RouteGuide {\n\
         \x20 rpc GetFeature(.routeguide.Point) returns (.routeguide.Feature);\n\
         \x20 rpc ListFeatures(.routeguide.Rectangle) returns (stream .routeguide.Feature);\n\
         \x20 rpc RecordRoute(stream .routeguide.Point) returns (.routeguide.RouteSummary);\n\
         \x20 rpc RouteChat(stream .routeguide.RouteNote) returns (stream .routeguide.RouteNote);\n\
         }\n"
    );
}

#[test]
fn describe_prints_messages_and_methods() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(&["describe", &server.addr, "kv.GetResponse"], ""));
    assert_eq!(
        out,
        "kv.GetResponse is a message:\nmessage GetResponse {\n  optional bytes value = 1;\n}\n"
    );
    let out = ok(rdma_rpc(
        &["describe", &server.addr, "routeguide.Rectangle"],
        "",
    ));
    assert_eq!(
        out,
        "routeguide.Rectangle is a message:\nmessage Rectangle {\n  \
         .routeguide.Point lo = 1;\n  .routeguide.Point hi = 2;\n}\n"
    );
    let out = ok(rdma_rpc(
        &["describe", &server.addr, "helloworld.Greeter/SayHello"],
        "",
    ));
    assert_eq!(
        out,
        "helloworld.Greeter.SayHello is a method:\n\
         rpc SayHello(.helloworld.HelloRequest) returns (.helloworld.HelloReply);\n"
    );
}

#[test]
fn describe_from_a_proto_file() {
    let server = TestServer::start(false);
    let file = proto("helloworld.proto");
    let out = ok(rdma_rpc(
        &[
            "describe",
            &server.addr,
            "helloworld.HelloReply",
            "--proto",
            &file,
        ],
        "",
    ));
    assert_eq!(
        out,
        "helloworld.HelloReply is a message:\nmessage HelloReply {\n  string message = 1;\n}\n"
    );
}
