//! The health service end to end: a real server on 127.0.0.1 (port 0) serving
//! `health_reporter()`'s server, and clients over `rdma://` on the soft provider.

use rpc_core::server::NamedService;
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Request, Status};
use rpc_health::pb::health_check_response::ServingStatus as WireStatus;
use rpc_health::pb::health_client::HealthClient;
use rpc_health::pb::HealthCheckRequest;
use rpc_health::server::{health_reporter, HealthReporter};
use rpc_health::ServingStatus;
use tokio::sync::oneshot;

/// A service the health service reports on (only its name matters here).
struct Greeter;

impl NamedService for Greeter {
    const NAME: &'static str = "helloworld.Greeter";
}

/// Serves a fresh health service until the returned sender is dropped.
async fn serve() -> (HealthReporter, String, oneshot::Sender<()>) {
    let (reporter, health) = health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let uri = format!("rdma://{}", listener.local_addr().expect("local addr"));
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        Server::builder()
            .add_service(health)
            .serve_with_listener(listener, async move {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
    });
    (reporter, uri, stop)
}

async fn check(client: &mut HealthClient<Channel>, service: &str) -> Result<WireStatus, Status> {
    let request = HealthCheckRequest {
        service: service.into(),
    };
    Ok(client.check(request).await?.into_inner().status())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_as_a_whole_is_serving_from_the_start() {
    let (_reporter, uri, _stop) = serve().await;
    let mut client = HealthClient::connect(uri).await.unwrap();
    let reply = client
        .check(Request::new(HealthCheckRequest::default()))
        .await
        .unwrap()
        .into_inner();
    // SERVING is 1 on the wire, by the gRPC health specification.
    assert_eq!(reply.status, 1);
    assert_eq!(reply.status(), WireStatus::Serving);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_sees_a_service_set_serving_then_not_serving_then_cleared() {
    let (mut reporter, uri, _stop) = serve().await;
    let mut client = HealthClient::connect(uri).await.unwrap();

    reporter.set_serving::<Greeter>().await;
    assert_eq!(
        check(&mut client, "helloworld.Greeter").await.unwrap(),
        WireStatus::Serving
    );

    reporter.set_not_serving::<Greeter>().await;
    assert_eq!(
        check(&mut client, "helloworld.Greeter").await.unwrap(),
        WireStatus::NotServing
    );
    // Only the service changed, not the server as a whole.
    assert_eq!(check(&mut client, "").await.unwrap(), WireStatus::Serving);

    reporter
        .set_service_status("helloworld.Greeter", ServingStatus::Unknown)
        .await;
    assert_eq!(
        check(&mut client, "helloworld.Greeter").await.unwrap(),
        WireStatus::Unknown
    );

    reporter.clear_service_status("helloworld.Greeter").await;
    let err = check(&mut client, "helloworld.Greeter").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_service_is_not_found() {
    let (reporter, uri, _stop) = serve().await;
    reporter.set_serving::<Greeter>().await;
    let mut client = HealthClient::connect(uri).await.unwrap();
    let err = check(&mut client, "helloworld.Nobody").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(err.message().contains("helloworld.Nobody"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloned_reporter_updates_clients_already_connected() {
    let (reporter, uri, _stop) = serve().await;
    let mut first = HealthClient::connect(uri.clone()).await.unwrap();
    let mut second = HealthClient::new(Channel::connect(uri).await.unwrap());
    assert_eq!(check(&mut first, "").await.unwrap(), WireStatus::Serving);
    assert_eq!(check(&mut second, "").await.unwrap(), WireStatus::Serving);

    // A clone, as a task that watches the application's state would hold.
    let clone = reporter.clone();
    clone
        .set_service_status("", ServingStatus::NotServing)
        .await;
    assert_eq!(check(&mut first, "").await.unwrap(), WireStatus::NotServing);
    assert_eq!(
        check(&mut second, "").await.unwrap(),
        WireStatus::NotServing
    );

    reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    assert_eq!(check(&mut first, "").await.unwrap(), WireStatus::Serving);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_takes_what_tonic_health_s_takes_an_endpoint_or_an_address() {
    let (_reporter, uri, _stop) = serve().await;
    let endpoint = rpc_core::transport::Endpoint::from_shared(uri.clone()).unwrap();
    let mut client = HealthClient::connect(endpoint).await.unwrap();
    assert_eq!(check(&mut client, "").await.unwrap(), WireStatus::Serving);
    let mut client = HealthClient::connect(uri.as_str().to_owned())
        .await
        .unwrap();
    assert_eq!(check(&mut client, "").await.unwrap(), WireStatus::Serving);
    let err = HealthClient::connect("http://127.0.0.1:1")
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "invalid URI");
    assert!(format!("{err:?}").contains("not an rdma://"), "{err:?}");
}
