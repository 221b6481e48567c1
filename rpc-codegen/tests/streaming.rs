//! Streaming methods generate tonic-build's shapes: one generator per call shape,
//! seen in the generated (prettyplease-formatted) file.

use std::fs;
use std::path::PathBuf;

fn generate(test: &str, builder: rpc_codegen::Builder) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("rpc-codegen-streaming")
        .join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    builder
        .out_dir(&dir)
        .codegen_path("::tonic::codegen")
        .compile_protos(&["../proto/route_guide.proto"], &["../proto"])
        .expect("every shape generates");
    fs::read_to_string(dir.join("routeguide.rs")).unwrap()
}

/// `text` without whitespace and trailing commas, so a signature reads the same
/// however prettyplease wrapped it.
fn flat(text: &str) -> String {
    let text: String = text.split_whitespace().collect();
    text.replace(",>", ">").replace(",)", ")")
}

fn assert_has(file: &str, wanted: &str) {
    assert!(
        flat(file).contains(&flat(wanted)),
        "missing {wanted:?} in:\n{file}"
    );
}

#[test]
fn the_server_trait_has_each_shape_s_signature() {
    let file = generate("trait", rpc_codegen::configure().build_client(false));
    assert_has(
        &file,
        "async fn get_feature(&self, request: ::tonic::codegen::Request<super::Point>) \
         -> Result<::tonic::codegen::Response<super::Feature>, ::tonic::codegen::Status>;",
    );
    assert_has(
        &file,
        "type ListFeaturesStream: ::tonic::codegen::Stream<Item = Result<super::Feature, \
         ::tonic::codegen::Status>> + Send + 'static;",
    );
    assert_has(
        &file,
        "async fn list_features(&self, request: ::tonic::codegen::Request<super::Rectangle>) \
         -> Result<::tonic::codegen::Response<Self::ListFeaturesStream>, \
         ::tonic::codegen::Status>;",
    );
    assert_has(
        &file,
        "async fn record_route(&self, request: ::tonic::codegen::Request<\
         ::tonic::codegen::Streaming<super::Point>>) -> \
         Result<::tonic::codegen::Response<super::RouteSummary>, ::tonic::codegen::Status>;",
    );
    assert_has(
        &file,
        "type RouteChatStream: ::tonic::codegen::Stream<Item = Result<super::RouteNote, \
         ::tonic::codegen::Status>> + Send + 'static;",
    );
    assert_has(
        &file,
        "async fn route_chat(&self, request: ::tonic::codegen::Request<\
         ::tonic::codegen::Streaming<super::RouteNote>>) -> \
         Result<::tonic::codegen::Response<Self::RouteChatStream>, ::tonic::codegen::Status>;",
    );
    assert!(
        !file.contains("GetFeatureStream"),
        "unary replies are no stream"
    );
    assert!(
        !file.contains("RecordRouteStream"),
        "nor client-streaming ones"
    );
    // Everything goes through the codegen path: nothing names a crate the user may
    // not depend on.
    for other in ["rpc_core", "futures", "tokio", "tower"] {
        assert!(!file.contains(other), "{other} named in:\n{file}");
    }
}

#[test]
fn the_client_has_each_shape_s_signature() {
    let file = generate("client", rpc_codegen::configure().build_server(false));
    assert_has(
        &file,
        "pub async fn list_features(&mut self, request: impl \
         ::tonic::codegen::IntoRequest<super::Rectangle>,) -> Result<\
         ::tonic::codegen::Response<::tonic::codegen::Streaming<super::Feature>>, \
         ::tonic::codegen::Status,>",
    );
    assert_has(
        &file,
        "pub async fn record_route(&mut self, request: impl \
         ::tonic::codegen::IntoStreamingRequest<Message = super::Point>,) -> \
         Result<::tonic::codegen::Response<super::RouteSummary>, ::tonic::codegen::Status>",
    );
    assert_has(
        &file,
        "pub async fn route_chat(&mut self, request: impl \
         ::tonic::codegen::IntoStreamingRequest<Message = super::RouteNote>,) -> Result<\
         ::tonic::codegen::Response<::tonic::codegen::Streaming<super::RouteNote>>, \
         ::tonic::codegen::Status,>",
    );
    // Streaming methods ask the transport for streaming calls; the unary one does not.
    assert_eq!(
        flat(&file)
            .matches(&flat(
                "T: ::tonic::codegen::Service<::tonic::codegen::OutgoingStream,"
            ))
            .count(),
        3,
        "{file}"
    );
    assert_has(&file, "self.inner.server_streaming(request.into_request(), \"/routeguide.RouteGuide/ListFeatures\")");
    assert_has(&file, "self.inner.client_streaming(request.into_streaming_request(), \"/routeguide.RouteGuide/RecordRoute\")");
    assert_has(&file, "self.inner.streaming(request.into_streaming_request(), \"/routeguide.RouteGuide/RouteChat\")");
}

#[test]
fn default_stubs_keep_the_stream_types_and_answer_unimplemented() {
    let file = generate(
        "stubs",
        rpc_codegen::configure()
            .build_client(false)
            .generate_default_stubs(true),
    );
    assert_has(&file, "type RouteChatStream:");
    assert_eq!(file.matches("Not yet implemented").count(), 4, "{file}");
}

#[test]
fn arc_self_applies_to_streaming_methods_too() {
    let file = generate(
        "arc",
        rpc_codegen::configure()
            .build_client(false)
            .use_arc_self(true),
    );
    assert_eq!(
        flat(&file)
            .matches(&flat("self: ::tonic::codegen::Arc<Self>"))
            .count(),
        4,
        "{file}"
    );
}
