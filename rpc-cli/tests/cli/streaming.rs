//! `call` of streaming methods: one JSON object per line in, one per line out.

use crate::support::{ok, rdma_rpc, TestServer};

#[test]
fn server_streaming_prints_one_reply_per_line() {
    let server = TestServer::start(true);
    let rectangle = r#"{"lo":{"latitude":400000000,"longitude":-750000000},
                        "hi":{"latitude":420000000,"longitude":-730000000}}"#;
    let out = ok(rdma_rpc(
        &[
            "call",
            &server.addr,
            "routeguide.RouteGuide/ListFeatures",
            rectangle,
        ],
        "",
    ));
    let names: Vec<String> = out
        .lines()
        .map(|line| {
            let reply: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            reply["name"].as_str().expect("a name").to_owned()
        })
        .collect();
    assert_eq!(
        names,
        [
            "Harbour light",
            "Old mill",
            "Ridge trail",
            "Ferry pier",
            "Summit cairn"
        ]
    );
}

#[test]
fn client_streaming_sends_each_line_of_standard_input() {
    let server = TestServer::start(true);
    let route = "{\"latitude\":407838351,\"longitude\":-746143763}\n\
                 {\"latitude\":408122808,\"longitude\":-743999179}\n\
                 \n\
                 {\"latitude\":413628156,\"longitude\":-749015468}\n\
                 {\"latitude\":410000000,\"longitude\":-745000000}\n";
    let out = ok(rdma_rpc(
        &["call", &server.addr, "routeguide.RouteGuide/RecordRoute"],
        route,
    ));
    let summary: serde_json::Value = serde_json::from_str(out.trim_end()).expect("one JSON line");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert_eq!(summary["pointCount"], 4, "{out}");
    assert_eq!(summary["featureCount"], 3, "{out}");
}

#[test]
fn bidirectional_streaming_answers_each_note() {
    let server = TestServer::start(true);
    let notes = "{\"location\":{\"latitude\":1,\"longitude\":1},\"message\":\"a\"}\n\
                 {\"location\":{\"latitude\":2,\"longitude\":2},\"message\":\"b\"}\n\
                 {\"location\":{\"latitude\":1,\"longitude\":1},\"message\":\"c\"}\n";
    let out = ok(rdma_rpc(
        &["call", &server.addr, "routeguide.RouteGuide/RouteChat"],
        notes,
    ));
    let messages: Vec<String> = out
        .lines()
        .map(|line| {
            let note: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            note["message"].as_str().expect("a message").to_owned()
        })
        .collect();
    // Each note is answered with every note taken at its place so far.
    assert_eq!(messages, ["a", "b", "a", "c"]);
}

#[test]
fn client_streaming_takes_the_argument_too() {
    let server = TestServer::start(true);
    let out = ok(rdma_rpc(
        &[
            "call",
            &server.addr,
            "routeguide.RouteGuide/RecordRoute",
            "{\"latitude\":407838351,\"longitude\":-746143763} {\"latitude\":1,\"longitude\":1}",
        ],
        "",
    ));
    let summary: serde_json::Value = serde_json::from_str(out.trim_end()).expect("one JSON line");
    assert_eq!(summary["pointCount"], 2, "{out}");
    assert_eq!(summary["featureCount"], 1, "{out}");
}
