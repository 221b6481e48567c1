//! `Endpoint::user_agent`, as tonic's: every call of the channel, unary or
//! streaming, carries `user-agent: <yours> rdma-rpc/<version>`; a value that is not
//! a header value is refused when the endpoint is built.

use rpc_core::client::{Grpc, OutgoingStream};
use rpc_core::metadata::MetadataMap;
use rpc_core::server::{BoxFuture, ServerCall, ServerReply};
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::{Extensions, Request, Status};
use tests::{path, Echo, EchoFn};
use tower::{Service, ServiceExt};

/// Fails every call with the `user-agent` it arrived with (any call shape can
/// carry a status back).
fn report_user_agent(call: ServerCall) -> BoxFuture<ServerReply> {
    let ua = call
        .metadata()
        .get("user-agent")
        .map_or("none".to_string(), |v| v.to_str().unwrap().to_string());
    Box::pin(async move { Err(Status::failed_precondition(ua)) })
}

async fn unary_sees(ch: Channel, own: Option<&str>) -> String {
    let mut req = Request::new(Echo {
        id: 1,
        data: vec![],
    });
    if let Some(own) = own {
        req.metadata_mut()
            .insert("user-agent", own.parse().unwrap());
    }
    let e = Grpc::new(ch)
        .unary::<Echo, Echo>(req, path("Echo"))
        .await
        .unwrap_err();
    e.message().to_string()
}

async fn stream_sees(mut ch: Channel) -> String {
    ServiceExt::<OutgoingStream>::ready(&mut ch).await.unwrap();
    let call = OutgoingStream {
        path: "/test.Echo/Watch",
        metadata: MetadataMap::new(),
        timeout: None,
        extensions: Extensions::new(),
        messages: tests::raw_stream::CountSource::boxed(0, 0, 0, None),
    };
    match ch.call(call).await {
        Ok(_) => panic!("the handler fails every call"),
        Err(e) => e.message().to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_carries_the_endpoints_user_agent() {
    let router = Server::builder().add_service(EchoFn(report_user_agent));
    let (addr, _stop) = tests::serve_router(router).await;
    let ours = concat!("Greeter/2 rdma-rpc/", env!("CARGO_PKG_VERSION"));
    let endpoint = Endpoint::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .user_agent("Greeter/2")
        .unwrap();
    let ch = endpoint.connect().await.unwrap();
    assert_eq!(unary_sees(ch.clone(), None).await, ours);
    assert_eq!(
        unary_sees(ch.clone(), Some("probe/1")).await,
        format!("probe/1 {ours}")
    );
    assert_eq!(stream_sees(ch).await, ours);
    // Balanced over such endpoints: once, not twice.
    let balanced = Channel::balance_list(std::iter::once(endpoint));
    assert_eq!(unary_sees(balanced, None).await, ours);
    // Without it, none.
    let plain = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    assert_eq!(unary_sees(plain, None).await, "none");
}

#[test]
fn a_user_agent_that_is_no_header_value_is_refused() {
    let e = Endpoint::from_static("rdma://127.0.0.1:1")
        .user_agent("bad\nagent")
        .unwrap_err();
    assert_eq!(e.to_string(), "user agent is not a valid header value");
}
