//! A handler that panics answers its call `INTERNAL`, and the server goes on
//! serving: whether the panic comes while its future runs or in the service's own
//! `call` (where a generated server decodes the request), with a deadline or
//! without one, through layers or without.

use std::time::Duration;

use rpc_core::client::Grpc;
use rpc_core::server::{BoxFuture, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::{Echo, EchoFn};

/// `InFuture` panics when its future is polled, `InCall` in `Service::call`
/// itself, `Echo` answers.
fn panicky(call: ServerCall) -> BoxFuture<ServerReply> {
    match call.path() {
        "/test.Echo/InCall" => panic!("a bug in the service's call"),
        "/test.Echo/InFuture" => Box::pin(async move { panic!("a bug in the handler") }),
        _ => Box::pin(async move {
            let m = call.into_request::<Echo>()?.into_inner();
            Ok(Response::new(m).map(ReplyBody::message))
        }),
    }
}

async fn call(ch: &Channel, method: &'static str, deadline: bool) -> Result<Echo, Status> {
    let mut req = Request::new(Echo {
        id: 7,
        data: vec![1, 2, 3],
    });
    if deadline {
        req.set_timeout(Duration::from_secs(30));
    }
    let mut grpc = Grpc::new(ch.clone());
    let call = grpc.unary::<Echo, Echo>(req, method);
    // A server whose poller died with the panic would never answer.
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap_or_else(|_| panic!("{method}: no answer within 10 s"))
        .map(Response::into_inner)
}

async fn panics_answer_internal(layered: bool) {
    let (addr, _stop) = if layered {
        // An interceptor that lets every call through: a real layer around the routes.
        let pass = |r: Request<()>| Ok::<_, Status>(r);
        let layer = rpc_core::service::InterceptorLayer::new(pass);
        tests::serve_router(Server::builder().layer(layer).add_service(EchoFn(panicky))).await
    } else {
        tests::serve_router(Server::builder().add_service(EchoFn(panicky))).await
    };
    let ch = Channel::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    for deadline in [false, true] {
        for method in ["/test.Echo/InFuture", "/test.Echo/InCall"] {
            let e = call(&ch, method, deadline).await.unwrap_err();
            assert_eq!(
                e.code(),
                Code::Internal,
                "{method} (deadline {deadline}): {e:?}"
            );
            assert_eq!(e.message(), "the handler panicked");
            // The server and the channel go on.
            let m = call(&ch, "/test.Echo/Echo", deadline).await.unwrap();
            assert_eq!((m.id, m.data), (7, vec![1, 2, 3]));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_answers_internal_and_the_server_goes_on() {
    panics_answer_internal(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_behind_layers_answers_internal_too() {
    panics_answer_internal(true).await;
}
