//! `Server::trace_fn`, as tonic's: it sees each call's head as an HTTP request,
//! and the handler runs inside the span it returns.

use std::sync::{Arc, Mutex};

use rpc_core::client::Grpc;
use rpc_core::server::{BoxFuture, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Channel, Server};
use rpc_core::{Request, Response};
use tests::{path, Echo, EchoFn};

/// Answers `id: 1` when its handler runs inside a span named `grpc-call`.
fn span_probe(_call: ServerCall) -> BoxFuture<ServerReply> {
    Box::pin(async move {
        let current = tracing::Span::current();
        let inside = current.metadata().map(|m| m.name()) == Some("grpc-call");
        Ok(Response::new(ReplyBody::message(Echo {
            id: u64::from(inside),
            data: vec![],
        })))
    })
}

#[tokio::test]
async fn each_call_runs_in_the_span_trace_fn_makes_from_its_head() {
    // A subscriber that records spans, for this (single-threaded) test only.
    let _subscriber = tracing::subscriber::set_default(tracing_subscriber::registry());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    let router = Server::builder()
        .trace_fn(move |req: &http::Request<()>| {
            let key = req
                .headers()
                .get("x-trace")
                .map(|v| v.to_str().unwrap().to_string());
            let kind = req.headers().get("content-type").cloned();
            seen.lock().unwrap().push((
                req.method().clone(),
                req.uri().path().to_string(),
                key,
                kind,
            ));
            tracing::info_span!("grpc-call")
        })
        .add_service(EchoFn(span_probe));
    let (addr, _stop) = tests::serve_router(router).await;
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let mut req = Request::new(Echo {
        id: 0,
        data: vec![],
    });
    req.metadata_mut().insert("x-trace", "abc".parse().unwrap());
    let reply = Grpc::new(ch)
        .unary::<Echo, Echo>(req, path("Echo"))
        .await
        .unwrap();
    assert_eq!(reply.into_inner().id, 1, "the handler ran inside the span");
    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 1);
    let (method, uri, key, kind) = &heads[0];
    assert_eq!(method, http::Method::POST);
    assert_eq!(uri, "/test.Echo/Echo");
    assert_eq!(key.as_deref(), Some("abc"));
    assert_eq!(kind.as_ref().unwrap(), "application/grpc");
}
