//! The reflection service end to end: a server on 127.0.0.1 (port 0) serving v1 and
//! v1alpha, asked over one bidirectional call each by the generated clients.

use prost::Message;
use prost_types::FileDescriptorProto;
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Streaming};
use rpc_reflection::pb::{v1, v1alpha};
use tokio::sync::{mpsc, oneshot};
use v1::server_reflection_request::MessageRequest;
use v1::server_reflection_response::MessageResponse;

/// Serves v1 and v1alpha reflection of the health service (and of reflection
/// itself), listing `only` when given; stops when the sender drops.
async fn serve(only: Option<&str>) -> (String, oneshot::Sender<()>) {
    let builder = || {
        let b = rpc_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(rpc_health::pb::FILE_DESCRIPTOR_SET);
        match only {
            Some(name) => b.with_service_name(name),
            None => b,
        }
    };
    let (v1, v1alpha) = (
        builder().build_v1().unwrap(),
        builder().build_v1alpha().unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("rdma://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        Server::builder()
            .add_service(v1)
            .add_service(v1alpha)
            .serve_with_listener(listener, async move {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
    });
    (uri, stop)
}

/// One open v1 `ServerReflectionInfo` call.
struct V1Call {
    requests: mpsc::Sender<v1::ServerReflectionRequest>,
    responses: Streaming<v1::ServerReflectionResponse>,
}

impl V1Call {
    async fn open(uri: &str) -> V1Call {
        let channel = Channel::connect(uri.to_owned()).await.unwrap();
        let mut client = v1::server_reflection_client::ServerReflectionClient::new(channel);
        let (requests, outbox) = mpsc::channel(1);
        let outbound = futures_util::stream::unfold(outbox, |mut rx| async move {
            rx.recv().await.map(|r| (r, rx))
        });
        let responses = client
            .server_reflection_info(outbound)
            .await
            .unwrap()
            .into_inner();
        V1Call {
            requests,
            responses,
        }
    }

    async fn ask(&mut self, request: MessageRequest) -> MessageResponse {
        let sent = v1::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request.clone()),
        };
        self.requests.send(sent).await.unwrap();
        let response = self.responses.message().await.unwrap().expect("an answer");
        assert_eq!(
            response.original_request.and_then(|r| r.message_request),
            Some(request)
        );
        response.message_response.expect("a response")
    }
}

fn listed(response: MessageResponse) -> Vec<String> {
    match response {
        MessageResponse::ListServicesResponse(list) => {
            list.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("not a service list: {other:?}"),
    }
}

fn file_names(response: MessageResponse) -> Vec<String> {
    match response {
        MessageResponse::FileDescriptorResponse(files) => files
            .file_descriptor_proto
            .iter()
            .map(|bytes| {
                FileDescriptorProto::decode(bytes.as_slice())
                    .unwrap()
                    .name()
                    .to_owned()
            })
            .collect(),
        other => panic!("not files: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_lists_services_and_sends_the_file_of_a_symbol() {
    let (uri, _stop) = serve(None).await;
    let mut call = V1Call::open(&uri).await;
    assert_eq!(
        listed(call.ask(MessageRequest::ListServices(String::new())).await),
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection"
        ]
    );
    for symbol in [
        "grpc.health.v1.Health",
        "grpc.health.v1.Health.Watch",
        "grpc.health.v1.HealthCheckResponse.ServingStatus",
        "grpc.health.v1.HealthCheckRequest.service",
    ] {
        let answer = call
            .ask(MessageRequest::FileContainingSymbol(symbol.into()))
            .await;
        assert_eq!(
            file_names(answer),
            ["grpc/health/v1/health.proto"],
            "{symbol}"
        );
    }
    let answer = call
        .ask(MessageRequest::FileByFilename(
            "grpc/health/v1/health.proto".into(),
        ))
        .await;
    assert_eq!(file_names(answer), ["grpc/health/v1/health.proto"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_symbol_is_an_error_answer_and_the_call_goes_on() {
    let (uri, _stop) = serve(None).await;
    let mut call = V1Call::open(&uri).await;
    match call
        .ask(MessageRequest::FileContainingSymbol("no.Such".into()))
        .await
    {
        MessageResponse::ErrorResponse(e) => {
            assert_eq!(e.error_code, Code::NotFound as i32);
            assert_eq!(e.error_message, "symbol \"no.Such\" not found");
        }
        other => panic!("not an error: {other:?}"),
    }
    match call
        .ask(MessageRequest::FileByFilename("nope.proto".into()))
        .await
    {
        MessageResponse::ErrorResponse(e) => assert_eq!(e.error_code, Code::NotFound as i32),
        other => panic!("not an error: {other:?}"),
    }
    // Still answering on the same call.
    assert_eq!(
        listed(call.ask(MessageRequest::ListServices(String::new())).await).len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_service_name_lists_only_that_service() {
    let (uri, _stop) = serve(Some("grpc.health.v1.Health")).await;
    let mut call = V1Call::open(&uri).await;
    assert_eq!(
        listed(call.ask(MessageRequest::ListServices(String::new())).await),
        ["grpc.health.v1.Health"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1alpha_answers_as_v1_does() {
    use v1alpha::server_reflection_request::MessageRequest as AlphaRequest;
    use v1alpha::server_reflection_response::MessageResponse as AlphaResponse;

    let (uri, _stop) = serve(None).await;
    let channel = Channel::connect(uri).await.unwrap();
    let mut client = v1alpha::server_reflection_client::ServerReflectionClient::new(channel);
    let requests = [
        AlphaRequest::ListServices(String::new()),
        AlphaRequest::FileContainingSymbol("grpc.health.v1.HealthCheckRequest".into()),
    ]
    .map(|r| v1alpha::ServerReflectionRequest {
        host: "h".into(),
        message_request: Some(r),
    });
    let mut responses = client
        .server_reflection_info(futures_util::stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let first = responses.message().await.unwrap().expect("an answer");
    assert_eq!(first.valid_host, "h");
    match first.message_response {
        Some(AlphaResponse::ListServicesResponse(list)) => {
            let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
            assert_eq!(
                names,
                [
                    "grpc.health.v1.Health",
                    "grpc.reflection.v1alpha.ServerReflection"
                ]
            );
        }
        other => panic!("not a service list: {other:?}"),
    }
    match responses
        .message()
        .await
        .unwrap()
        .and_then(|r| r.message_response)
    {
        Some(AlphaResponse::FileDescriptorResponse(files)) => {
            assert_eq!(files.file_descriptor_proto.len(), 1);
            let file =
                FileDescriptorProto::decode(files.file_descriptor_proto[0].as_slice()).unwrap();
            assert_eq!(file.name(), "grpc/health/v1/health.proto");
        }
        other => panic!("not files: {other:?}"),
    }
    // The client's requests ended, so the answers end, OK.
    assert!(responses.message().await.unwrap().is_none());
}
