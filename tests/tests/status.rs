//! A handler's status reaches the client whole, over RC and UD: code, message,
//! metadata and details (`Status::with_details`), small or larger than a slot.

use std::task::{Context, Poll};

use prost::bytes::Bytes;
use rpc_core::client::Grpc;
use rpc_core::metadata::MetadataValue;
use rpc_core::server::{BoxFuture, NamedService, ServerCall, ServerReply};
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Request, Status};
use tests::Echo;
use tokio::sync::oneshot;

const FAIL: &str = "/test.Status/Fail";

/// `test.Status`: `Fail` fails with [`status`] for the request's `id` (the length of
/// the details).
#[derive(Clone)]
struct Failing;

impl NamedService for Failing {
    const NAME: &'static str = "test.Status";
}

/// What the handler returns for details of `len` bytes, built as a user would.
fn status(len: usize) -> Status {
    let details: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut s = Status::with_details(
        Code::FailedPrecondition,
        "quota spent: try again in 5 s",
        Bytes::from(details),
    );
    s.metadata_mut().insert("retry-after", "5".parse().unwrap());
    s.metadata_mut()
        .insert_bin("trace-bin", MetadataValue::from_bytes(&[0, 1, 255]));
    s
}

impl tower::Service<ServerCall> for Failing {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        Box::pin(async move {
            let m = call.into_request::<Echo>()?.into_inner();
            Err(status(m.id as usize))
        })
    }
}

/// Serves [`Failing`] on an ephemeral port of 127.0.0.1 until the sender is dropped.
async fn serve() -> (std::net::SocketAddr, oneshot::Sender<()>) {
    tests::serve_router(Server::builder().add_service(Failing)).await
}

async fn fail(ch: &Channel, details: usize) -> Status {
    let req = Request::new(Echo {
        id: details as u64,
        data: vec![],
    });
    Grpc::new(ch.clone())
        .unary::<Echo, Echo>(req, FAIL)
        .await
        .unwrap_err()
}

fn assert_whole(got: &Status, details: usize) {
    let sent = status(details);
    assert_eq!(got.code(), Code::FailedPrecondition, "{got:?}");
    assert_eq!(got.message(), sent.message());
    assert_eq!(got.details(), sent.details(), "details of {details} bytes");
    assert_eq!(
        got.metadata().get("retry-after").unwrap().to_str().unwrap(),
        "5"
    );
    assert_eq!(
        &got.metadata()
            .get_bin("trace-bin")
            .unwrap()
            .to_bytes()
            .unwrap()[..],
        &[0, 1, 255]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_rc_a_status_arrives_with_its_details_and_metadata() {
    let (addr, _stop) = serve().await;
    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    // In the response's one frame, then far beyond a slot (pulled in fragments).
    for details in [0, 300, 100_000] {
        assert_whole(&fail(&ch, details).await, details);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_ud_a_status_arrives_with_its_details_and_metadata() {
    let (addr, _stop) = serve().await;
    let ch = Channel::connect(format!("rdma+ud://{addr}")).await.unwrap();
    for details in [0, 300] {
        assert_whole(&fail(&ch, details).await, details);
    }
    if rpc_transport::msg::open_device(None).unwrap().caps().ud {
        assert_eq!(ch.ud_stats().unwrap().calls, 2, "both calls went over UD");
    } else {
        assert!(ch.ud_stats().is_none(), "no UD on this device: over RC");
    }
}
