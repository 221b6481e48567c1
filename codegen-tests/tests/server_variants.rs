//! Server traits generated with `use_arc_self(true)` and
//! `generate_default_stubs(true)`.

use std::sync::Arc;

use codegen_tests::loopback::Loopback;
use codegen_tests::variants::echo::echo_client::EchoClient;
use codegen_tests::variants::echo::echo_server::{Echo, EchoServer};
use codegen_tests::variants::echo::{EchoRequest, EchoResponse};
use codegen_tests::variants::helloworld::greeter_client::GreeterClient;
use codegen_tests::variants::helloworld::greeter_server::{Greeter, GreeterServer};
use codegen_tests::variants::helloworld::HelloRequest;
use rpc_core::{Code, Request, Response, Status};

/// Implements nothing: every method is the generated stub.
struct Nothing;

#[rpc_core::async_trait]
impl Greeter for Nothing {}

#[tokio::test]
async fn a_method_left_out_answers_unimplemented() {
    let mut client = GreeterClient::new(Loopback::new(GreeterServer::new(Nothing)));
    let status = client.say_hello(HelloRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert_eq!(status.message(), "Not yet implemented");
}

/// Hands `self` to a spawned task, which `&self` could not.
struct Spawner {
    prefix: Vec<u8>,
}

#[rpc_core::async_trait]
impl Echo for Spawner {
    async fn unary_echo(
        self: Arc<Self>,
        request: Request<EchoRequest>,
    ) -> Result<Response<EchoResponse>, Status> {
        let payload = request.into_inner().payload;
        let task = tokio::spawn(async move { [&self.prefix[..], &payload[..]].concat() });
        let payload = task.await.map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(EchoResponse { payload }))
    }
}

#[tokio::test]
async fn arc_self_methods_can_move_self_into_a_task() {
    let server = EchoServer::new(Spawner {
        prefix: b"re: ".to_vec(),
    });
    let mut client = EchoClient::new(Loopback::new(server));
    let reply = client
        .unary_echo(EchoRequest {
            payload: b"hi".to_vec(),
        })
        .await
        .unwrap();
    assert_eq!(reply.into_inner().payload, b"re: hi");
}

mod streaming {
    use std::pin::Pin;
    use std::sync::Arc;

    use codegen_tests::loopback::Loopback;
    use codegen_tests::variants::routeguide::route_guide_client::RouteGuideClient;
    use codegen_tests::variants::routeguide::route_guide_server::{RouteGuide, RouteGuideServer};
    use codegen_tests::variants::routeguide::{Feature, Point, Rectangle, RouteNote};
    use futures_util::{stream, Stream, StreamExt};
    use rpc_core::{Code, Request, Response, Status, Streaming};

    type Notes = Pin<Box<dyn Stream<Item = Result<RouteNote, Status>> + Send>>;

    /// Implements only the chat, moving `self` into the reply stream; the other
    /// methods are the generated stubs.
    struct Chatty {
        suffix: String,
    }

    #[rpc_core::async_trait]
    impl RouteGuide for Chatty {
        type ListFeaturesStream = stream::Empty<Result<Feature, Status>>;
        type RouteChatStream = Notes;

        async fn route_chat(
            self: Arc<Self>,
            request: Request<Streaming<RouteNote>>,
        ) -> Result<Response<Notes>, Status> {
            let replies = request.into_inner().map(move |note| {
                note.map(|n| RouteNote {
                    message: format!("{}{}", n.message, self.suffix),
                    ..n
                })
            });
            Ok(Response::new(Box::pin(replies)))
        }
    }

    #[tokio::test]
    async fn streaming_stubs_answer_unimplemented_and_arc_self_reaches_the_stream() {
        let server = RouteGuideServer::new(Chatty { suffix: "!".into() });
        let mut client = RouteGuideClient::new(Loopback::new(server));
        let listed = client
            .list_features(Rectangle::default())
            .await
            .unwrap_err();
        assert_eq!(listed.code(), Code::Unimplemented);
        let recorded = client
            .record_route(stream::iter([Point::default()]))
            .await
            .unwrap_err();
        assert_eq!(recorded.code(), Code::Unimplemented);

        let note = RouteNote {
            location: None,
            message: "hey".into(),
        };
        let mut chat = client
            .route_chat(stream::iter([note]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(chat.message().await.unwrap().unwrap().message, "hey!");
        assert_eq!(chat.message().await.unwrap(), None);
    }
}
