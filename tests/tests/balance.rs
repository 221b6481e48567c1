//! Client-side load balancing, as tonic's: `Channel::balance_list` and
//! `Channel::balance_channel` spread calls over every server; an endpoint removed
//! with `Change::Remove` gets no more calls; a server that stops is passed over once
//! its connection fails, and calls keep succeeding on the others.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rpc_core::transport::channel::Change;
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Answers with its name, counting its calls.
struct Named {
    name: &'static str,
    calls: Arc<AtomicUsize>,
}

#[rpc_core::async_trait]
impl Greeter for Named {
    async fn say_hello(&self, _: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(HelloReply {
            message: self.name.to_string(),
        }))
    }
}

struct Running {
    addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Running {
    fn endpoint(&self) -> Endpoint {
        Endpoint::from_shared(format!("rdma://{}", self.addr)).unwrap()
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }
}

async fn serve(name: &'static str) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let (stop, stopped) = oneshot::channel::<()>();
    let svc = GreeterServer::new(Named {
        name,
        calls: calls.clone(),
    });
    let task = tokio::spawn(async move {
        Server::builder()
            .add_service(svc)
            .serve_with_listener(listener, async {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
    });
    Running {
        addr,
        calls,
        stop,
        task,
    }
}

async fn hello(client: &mut GreeterClient<Channel>) -> Result<String, Status> {
    let r = client.say_hello(HelloRequest { name: "x".into() }).await?;
    Ok(r.into_inner().message)
}

/// Calls until every server has answered once: every endpoint is then connected
/// (an endpoint still dialing is passed over, so the first calls may all go to the
/// endpoint that connected first).
async fn until_every_server_answered(client: &mut GreeterClient<Channel>, servers: &[&Running]) {
    let mut calls = 0;
    while servers.iter().any(|s| s.calls() == 0) {
        hello(client).await.expect("a balanced call succeeds");
        calls += 1;
        assert!(calls < 100_000, "calls never reached every server");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balance_list_spreads_calls_over_every_server() {
    let servers = [serve("a").await, serve("b").await, serve("c").await];
    let channel = Channel::balance_list(servers.iter().map(Running::endpoint));
    let mut client = GreeterClient::new(channel);
    until_every_server_answered(&mut client, &servers.iter().collect::<Vec<_>>()).await;
    let before: Vec<usize> = servers.iter().map(Running::calls).collect();
    for _ in 0..90 {
        let name = hello(&mut client).await.expect("a balanced call succeeds");
        assert!(["a", "b", "c"].contains(&name.as_str()), "{name}");
    }
    let counts: Vec<usize> = servers
        .iter()
        .zip(&before)
        .map(|(s, b)| s.calls() - b)
        .collect();
    assert_eq!(counts.iter().sum::<usize>(), 90, "{counts:?}");
    // Each of the 90 goes to one of two random endpoints: all three are used
    // (each call picks a server first with odds 1/3: one missed by all 90 has odds
    // of (2/3)^90, about 1e-16).
    assert!(
        counts.iter().all(|&n| n > 0),
        "every server got calls: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balance_channel_follows_inserts_and_removes() {
    let servers = [serve("a").await, serve("b").await, serve("c").await];
    let (channel, changes) = Channel::balance_channel::<&'static str>(8);
    for (key, s) in ["a", "b", "c"].into_iter().zip(&servers) {
        changes
            .send(Change::Insert(key, s.endpoint()))
            .await
            .unwrap();
    }
    let mut client = GreeterClient::new(channel);
    until_every_server_answered(&mut client, &servers.iter().collect::<Vec<_>>()).await;
    let before: Vec<usize> = servers.iter().map(Running::calls).collect();

    changes.send(Change::Remove("b")).await.unwrap();
    for _ in 0..60 {
        let name = hello(&mut client).await.expect("a balanced call succeeds");
        assert_ne!(name, "b", "a removed endpoint gets no more calls");
    }
    let after: Vec<usize> = servers.iter().map(Running::calls).collect();
    assert_eq!(after[1], before[1], "{before:?} then {after:?}");
    assert!(
        after[0] > before[0] && after[2] > before[2],
        "{before:?} then {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_is_passed_over_once_its_connection_fails() {
    let [a, b, c] = [serve("a").await, serve("b").await, serve("c").await];
    let channel = Channel::balance_list([&a, &b, &c].into_iter().map(Running::endpoint));
    let mut client = GreeterClient::new(channel);
    until_every_server_answered(&mut client, &[&a, &b, &c]).await;

    c.stop.send(()).unwrap();
    c.task.await.expect("server c stopped");
    let mut failures = Vec::new();
    let mut names = Vec::new();
    for _ in 0..60 {
        match hello(&mut client).await {
            Ok(name) => names.push(name),
            Err(s) => failures.push(s),
        }
    }
    // At most the call that finds c's connection gone, and only UNAVAILABLE.
    assert!(failures.len() <= 1, "{failures:?}");
    assert!(
        failures.iter().all(|s| s.code() == Code::Unavailable),
        "{failures:?}"
    );
    assert!(names.iter().all(|n| n == "a" || n == "b"), "{names:?}");
    assert!(
        names[names.len() - 30..].len() == 30,
        "the last 30 calls succeeded"
    );
    assert!(names.contains(&"a".to_string()) && names.contains(&"b".to_string()));
}
