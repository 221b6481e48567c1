//! `Watch` end to end: a real server on 127.0.0.1 (port 0) serving
//! `health_reporter()`'s server, and `HealthClient::watch` over `rdma://` on the soft
//! provider (streaming calls run on RC).

use std::time::Duration;

use rpc_core::server::NamedService;
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Streaming};
use rpc_health::pb::health_check_response::ServingStatus as WireStatus;
use rpc_health::pb::health_client::HealthClient;
use rpc_health::pb::{HealthCheckRequest, HealthCheckResponse};
use rpc_health::server::{health_reporter, HealthReporter};
use rpc_health::ServingStatus;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A service the health service reports on (only its name matters here).
struct Greeter;

impl NamedService for Greeter {
    const NAME: &'static str = "helloworld.Greeter";
}

struct Serving {
    reporter: HealthReporter,
    uri: String,
    stop: oneshot::Sender<()>,
    server: JoinHandle<()>,
}

/// Serves a fresh health service until `stop` fires (or is dropped); calls still
/// open then have `grace` to end before the server cancels them.
async fn serve(grace: Duration) -> Serving {
    let (reporter, health) = health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let uri = format!("rdma://{}", listener.local_addr().expect("local addr"));
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        Server::builder()
            .shutdown_grace_period(grace)
            .add_service(health)
            .serve_with_listener(listener, async move {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
    });
    Serving {
        reporter,
        uri,
        stop,
        server,
    }
}

async fn watch(uri: &str, service: &str) -> Streaming<HealthCheckResponse> {
    let mut client = HealthClient::connect(uri.to_owned()).await.unwrap();
    let request = HealthCheckRequest {
        service: service.into(),
    };
    client.watch(request).await.unwrap().into_inner()
}

/// The next reply's status; fails the test if the stream ended or failed instead.
async fn next(stream: &mut Streaming<HealthCheckResponse>) -> WireStatus {
    let reply = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a reply within 10 s")
        .expect("the stream is still open")
        .expect("a reply, not the stream's end");
    reply.status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sends_the_status_at_once_then_each_change() {
    let s = serve(Duration::from_secs(10)).await;
    s.reporter.set_serving::<Greeter>().await;
    let mut stream = watch(&s.uri, "helloworld.Greeter").await;
    assert_eq!(next(&mut stream).await, WireStatus::Serving);

    s.reporter.set_not_serving::<Greeter>().await;
    assert_eq!(next(&mut stream).await, WireStatus::NotServing);

    s.reporter.set_serving::<Greeter>().await;
    assert_eq!(next(&mut stream).await, WireStatus::Serving);

    s.reporter
        .set_service_status("helloworld.Greeter", ServingStatus::Unknown)
        .await;
    assert_eq!(next(&mut stream).await, WireStatus::Unknown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_of_a_service_sees_its_change_and_only_its_own() {
    let s = serve(Duration::from_secs(10)).await;
    s.reporter.set_serving::<Greeter>().await;
    let mut first = watch(&s.uri, "helloworld.Greeter").await;
    let mut second = watch(&s.uri, "helloworld.Greeter").await;
    let mut overall = watch(&s.uri, "").await;
    assert_eq!(next(&mut first).await, WireStatus::Serving);
    assert_eq!(next(&mut second).await, WireStatus::Serving);
    assert_eq!(next(&mut overall).await, WireStatus::Serving);

    s.reporter.set_not_serving::<Greeter>().await;
    assert_eq!(next(&mut first).await, WireStatus::NotServing);
    assert_eq!(next(&mut second).await, WireStatus::NotServing);

    // The server as a whole changes next: its watcher's next reply is that change,
    // so the Greeter's change above was not sent to it.
    s.reporter
        .set_service_status("", ServingStatus::NotServing)
        .await;
    assert_eq!(next(&mut overall).await, WireStatus::NotServing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_as_a_whole_is_watched_as_the_empty_name() {
    let s = serve(Duration::from_secs(10)).await;
    let mut stream = watch(&s.uri, "").await;
    assert_eq!(next(&mut stream).await, WireStatus::Serving);
    s.reporter
        .set_service_status("", ServingStatus::NotServing)
        .await;
    assert_eq!(next(&mut stream).await, WireStatus::NotServing);
}

/// As tonic-health 0.14: an unknown service fails the call with NOT_FOUND (the gRPC
/// specification would send SERVICE_UNKNOWN and keep the call open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_an_unknown_service_fails_not_found_as_tonic_health_does() {
    let s = serve(Duration::from_secs(10)).await;
    let mut client = HealthClient::connect(s.uri.clone()).await.unwrap();
    let request = HealthCheckRequest {
        service: "helloworld.Nobody".into(),
    };
    let err = client.watch(request).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(err.message().contains("helloworld.Nobody"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_a_service_ends_its_watch_ok() {
    let mut s = serve(Duration::from_secs(10)).await;
    s.reporter.set_serving::<Greeter>().await;
    let mut stream = watch(&s.uri, "helloworld.Greeter").await;
    assert_eq!(next(&mut stream).await, WireStatus::Serving);

    s.reporter.clear_service_status("helloworld.Greeter").await;
    let end = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("the stream ends within 10 s");
    assert!(matches!(end, Ok(None)), "{end:?}");
}

/// A watch never ends by itself: a graceful shutdown waits the grace period for it,
/// then cancels it, and the client hears UNAVAILABLE (the server went away), which
/// the health specification tells it to retry with backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_shutting_down_ends_the_watch_unavailable() {
    let s = serve(Duration::from_millis(100)).await;
    let mut stream = watch(&s.uri, "").await;
    assert_eq!(next(&mut stream).await, WireStatus::Serving);

    s.stop.send(()).unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("the stream ends within 10 s");
    let err = end.expect_err("the watch ends with an error, not OK");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    tokio::time::timeout(Duration::from_secs(10), s.server)
        .await
        .expect("the server stops once its grace period is over")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_over_a_channel_sits_beside_check_calls() {
    let s = serve(Duration::from_secs(10)).await;
    let channel = Channel::connect(s.uri.clone()).await.unwrap();
    let mut client = HealthClient::new(channel);
    let mut stream = client
        .watch(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next(&mut stream).await, WireStatus::Serving);
    // Unary calls on the same client and channel while the stream is open.
    for _ in 0..3 {
        let reply = client.check(HealthCheckRequest::default()).await.unwrap();
        assert_eq!(reply.into_inner().status(), WireStatus::Serving);
    }
    s.reporter
        .set_service_status("", ServingStatus::NotServing)
        .await;
    assert_eq!(next(&mut stream).await, WireStatus::NotServing);
}

/// Straight on the service, no transport: what each reporter call sends a watcher,
/// seen the moment it is made.
#[tokio::test]
async fn setting_the_status_a_service_already_has_sends_its_watchers_nothing() {
    use futures_util::{FutureExt, StreamExt};
    use rpc_core::Request;
    use rpc_health::pb::health_server::Health;
    use rpc_health::server::HealthService;

    let reporter = HealthReporter::new();
    reporter.set_serving::<Greeter>().await;
    let service = HealthService::from_health_reporter(reporter.clone());
    let request = Request::new(HealthCheckRequest {
        service: Greeter::NAME.into(),
    });
    let mut stream = service.watch(request).await.unwrap().into_inner();
    let first = stream.next().now_or_never().expect("the status at once");
    assert_eq!(first.unwrap().unwrap().status(), WireStatus::Serving);
    assert!(
        stream.next().now_or_never().is_none(),
        "nothing until a change"
    );

    reporter.set_serving::<Greeter>().await;
    assert!(
        stream.next().now_or_never().is_none(),
        "no change, no reply"
    );

    reporter.set_not_serving::<Greeter>().await;
    let changed = stream.next().now_or_never().expect("the change at once");
    assert_eq!(changed.unwrap().unwrap().status(), WireStatus::NotServing);
}
