//! Cross-process: a client process killed (SIGKILL) while its calls run on the server
//! does not disturb other clients, and the server reclaims what it held: its handlers
//! are stopped and its share of the receive pool goes to the next client.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::{Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};
use tests::ChildTest;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

const CHILD: &str = "RDMA_RPC_TEST_CHILD_CLIENT_OF";

/// Calls in flight per connection: a window of `CALLS + 1` credits (one is kept by the
/// client for CANCEL frames), and the pool holds exactly two such windows; the server
/// takes two connections at most, so each window grows to its cap.
const CALLS: u32 = 4;
const CREDITS: u32 = CALLS + 1;
const POOL: u32 = 2 * CREDITS;

/// A greeter whose `block-*` names wait for a permit the test hands out. It reports
/// each such handler when it starts and when it is dropped before finishing.
struct Gate {
    entered: mpsc::UnboundedSender<String>,
    dropped: mpsc::UnboundedSender<String>,
    release: Arc<Semaphore>,
}

/// Reports the handler it lives in if that handler is dropped before it finishes.
struct DropWitness {
    name: Option<String>,
    tx: mpsc::UnboundedSender<String>,
}

impl Drop for DropWitness {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let _ = self.tx.send(name);
        }
    }
}

#[rpc_core::async_trait]
impl Greeter for Gate {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let name = req.into_inner().name;
        if name.starts_with("block") {
            let mut witness = DropWitness {
                name: Some(name.clone()),
                tx: self.dropped.clone(),
            };
            let _ = self.entered.send(name.clone());
            let permit = self.release.acquire().await;
            permit.expect("semaphore open").forget();
            witness.name = None; // finished: not a drop
        }
        Ok(Response::new(HelloReply {
            message: format!("Hello {name}!"),
        }))
    }
}

/// Receives `n` names from `rx` within `secs` seconds.
async fn recv_n(
    rx: &mut mpsc::UnboundedReceiver<String>,
    n: usize,
    secs: u64,
    what: &str,
) -> Vec<String> {
    let mut got = Vec::new();
    let t = tokio::time::timeout(Duration::from_secs(secs), async {
        while got.len() < n {
            got.push(rx.recv().await.expect("server alive"));
        }
    })
    .await;
    assert!(t.is_ok(), "{what}: only {got:?} of {n} within {secs} s");
    got.sort();
    got
}

fn names(prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = (0..CALLS).map(|i| format!("{prefix}-{i}")).collect();
    v.sort();
    v
}

/// In the child: connects to the server named by the environment, starts `CALLS`
/// blocking calls, then waits (for its stdin to close, or to be killed). In a normal
/// test run: does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a child process"]
async fn child_client() {
    let Some(uri) = std::env::var_os(CHILD) else {
        return;
    };
    let ch = Endpoint::from_shared(uri.into_string().unwrap())
        .unwrap()
        .credits(CREDITS)
        .connect()
        .await
        .expect("child connects");
    let mut calls = Vec::new();
    for i in 0..CALLS {
        let mut g = GreeterClient::new(ch.clone());
        calls.push(tokio::spawn(async move {
            g.say_hello(HelloRequest {
                name: format!("block-child-{i}"),
            })
            .await
        }));
    }
    println!("CALLING");
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_client_process_is_reclaimed_without_disturbing_others() {
    tests::init_tracing();
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel();
    let release = Arc::new(Semaphore::new(0));
    let gate = Gate {
        entered: entered_tx,
        dropped: dropped_tx,
        release: release.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("rdma://{}", listener.local_addr().unwrap());
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(
        Server::builder()
            .credits_per_connection(CALLS)
            .receive_pool_slots(POOL)
            .max_connections(2)
            .add_service(GreeterServer::new(gate))
            .serve_with_listener(listener, async move {
                let _ = stop_rx.await;
            }),
    );
    let ep = Endpoint::from_shared(uri.clone()).unwrap().credits(CREDITS);

    // A client in this process that calls, one call after another, throughout.
    let survivor: Channel = ep.connect().await.unwrap();
    let (done_tx, mut done) = watch::channel(0u64);
    let stop = Arc::new(AtomicBool::new(false));
    let calling = {
        let mut g = GreeterClient::new(survivor.clone());
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("survivor-{i}");
                let r = tokio::time::timeout(
                    Duration::from_secs(10),
                    g.say_hello(HelloRequest { name: name.clone() }),
                )
                .await
                .expect("the survivor's calls never stall")
                .expect("the survivor's calls never fail");
                assert_eq!(r.into_inner().message, format!("Hello {name}!"));
                i += 1;
                done_tx.send_replace(i);
            }
        })
    };

    // The child client takes the rest of the pool and fills its credits with calls
    // that block in the handler.
    let mut child = ChildTest::spawn("child_client", (CHILD, uri.as_str()));
    child.read_tagged("CALLING").await;
    let got = recv_n(&mut entered, CALLS as usize, 30, "child calls entered").await;
    assert_eq!(got, names("block-child"));
    assert!(
        ep.connect().await.is_err(),
        "the survivor and the child fill the server"
    );

    // Kill the child while its calls are in the handlers.
    let before_kill = *done.borrow();
    child.child.kill().await.unwrap();
    drop(child);

    // Its handlers are stopped (dropped, never finished)...
    let got = recv_n(&mut dropped, CALLS as usize, 10, "child handlers dropped").await;
    assert_eq!(got, names("block-child"));

    // ...and its share of the pool goes to a new client: without reclamation this
    // connection is refused.
    let t0 = Instant::now();
    let newcomer = loop {
        match ep.connect().await {
            Ok(ch) => break ch,
            Err(e) => {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "no new client fits 10 s after the kill: {e}"
                );
                tokio::task::yield_now().await;
            }
        }
    };
    // The newcomer uses every credit the dead client held: all its calls are on the
    // server at once, then all complete.
    let mut calls = Vec::new();
    for i in 0..CALLS {
        let mut g = GreeterClient::new(newcomer.clone());
        calls.push(tokio::spawn(async move {
            g.say_hello(HelloRequest {
                name: format!("block-new-{i}"),
            })
            .await
        }));
    }
    let got = recv_n(&mut entered, CALLS as usize, 30, "newcomer calls entered").await;
    assert_eq!(got, names("block-new"));
    assert!(
        ep.connect().await.is_err(),
        "the dead client's credits were returned once, not twice"
    );
    release.add_permits(CALLS as usize);
    for (i, c) in calls.into_iter().enumerate() {
        let r = tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .expect("the newcomer's calls complete")
            .unwrap()
            .unwrap();
        assert_eq!(r.into_inner().message, format!("Hello block-new-{i}!"));
    }

    // The survivor kept going across the kill, without an error or a stall.
    tokio::time::timeout(
        Duration::from_secs(10),
        done.wait_for(|&n| n >= before_kill + 10),
    )
    .await
    .expect("the survivor made progress after the kill")
    .expect("the survivor's caller is still running");
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(10), calling)
        .await
        .expect("the survivor's caller stops")
        .unwrap();
    assert!(dropped.try_recv().is_err(), "no other handler was dropped");

    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server shuts down")
        .unwrap()
        .unwrap();
}
