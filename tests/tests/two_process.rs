//! End to end across two processes with generated code: the server (greeter + kv) runs
//! as a child process (this test binary re-executed with an environment variable), the
//! parent calls it through `GreeterClient`/`KeyValueClient`, then shuts it down by
//! closing its stdin and expects a clean exit.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Request, Response, Status};
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::greeter_server::{Greeter, GreeterServer};
use tests::hello_world::{HelloReply, HelloRequest};
use tests::kv::key_value_client::KeyValueClient;
use tests::kv::key_value_server::{KeyValue, KeyValueServer};
use tests::kv::{
    DeleteRequest, DeleteResponse, Entry, GetRequest, GetResponse, PutRequest, PutResponse,
    ScanRequest, ScanResponse,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

const CHILD: &str = "RDMA_RPC_TEST_TWO_PROCESS_SERVER";

/// Greets by name; an empty name is `INVALID_ARGUMENT`.
struct Greet;

#[rpc_core::async_trait]
impl Greeter for Greet {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let name = req.into_inner().name;
        if name.is_empty() {
            return Err(Status::invalid_argument("name must not be empty"));
        }
        Ok(Response::new(HelloReply {
            message: format!("Hello {name}!"),
        }))
    }
}

/// An in-memory key-value store; an empty key is `INVALID_ARGUMENT`.
#[derive(Default)]
struct Store(Mutex<BTreeMap<Vec<u8>, Vec<u8>>>);

impl Store {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn check_key(key: &[u8]) -> Result<(), Status> {
    if key.is_empty() {
        return Err(Status::invalid_argument("key must not be empty"));
    }
    Ok(())
}

#[rpc_core::async_trait]
impl KeyValue for Store {
    async fn get(&self, req: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let key = req.into_inner().key;
        check_key(&key)?;
        let value = self.map().get(&key).cloned();
        Ok(Response::new(GetResponse { value }))
    }

    async fn put(&self, req: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let PutRequest { key, value } = req.into_inner();
        check_key(&key)?;
        let previous = self.map().insert(key, value);
        Ok(Response::new(PutResponse { previous }))
    }

    async fn delete(
        &self,
        req: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        let key = req.into_inner().key;
        check_key(&key)?;
        let existed = self.map().remove(&key).is_some();
        Ok(Response::new(DeleteResponse { existed }))
    }

    async fn scan(&self, req: Request<ScanRequest>) -> Result<Response<ScanResponse>, Status> {
        let ScanRequest {
            start_key,
            end_key,
            limit,
        } = req.into_inner();
        let limit = if limit == 0 { 100 } else { limit as usize };
        let end = if end_key.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(end_key)
        };
        let map = self.map();
        let mut it = map.range((Bound::Included(start_key), end));
        let entries: Vec<Entry> = it
            .by_ref()
            .take(limit)
            .map(|(k, v)| Entry {
                key: k.clone(),
                value: v.clone(),
            })
            .collect();
        let next_key = it.next().map(|(k, _)| k.clone()).unwrap_or_default();
        Ok(Response::new(ScanResponse { entries, next_key }))
    }
}

/// In the child: serves greeter + kv on 127.0.0.1 port 0, prints the address, and
/// shuts down when stdin closes. Ignored in a normal run; outside a child it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a child process"]
async fn child_server() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = async {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    };
    println!("ADDR {addr}");
    Server::builder()
        .add_service(GreeterServer::new(Greet))
        .add_service(KeyValueServer::new(Store::default()))
        .serve_with_listener(listener, stop)
        .await
        .expect("server runs and shuts down cleanly");
    println!("SERVER STOPPED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_clients_call_a_server_in_another_process() {
    tests::init_tracing();
    let exe = std::env::current_exe().unwrap();
    let mut child = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "child_server",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            // libtest prints "test child_server ... " before the test's own output.
            if let Some(i) = l.find("ADDR ") {
                return l[i + 5..].trim().to_string();
            }
        }
        panic!("child exited without an address");
    })
    .await
    .expect("child server started within 30 s");

    let ch = Channel::connect(format!("rdma://{addr}")).await.unwrap();
    let mut greeter = GreeterClient::new(ch.clone());
    let mut kv = KeyValueClient::new(ch.clone());

    // A success, through each service.
    let r = greeter
        .say_hello(HelloRequest {
            name: "parent".into(),
        })
        .await
        .unwrap();
    assert_eq!(r.into_inner().message, "Hello parent!");
    let put = kv
        .put(PutRequest {
            key: b"k".to_vec(),
            value: b"v1".to_vec(),
        })
        .await
        .unwrap();
    assert_eq!(put.into_inner().previous, None);
    let get = kv.get(GetRequest { key: b"k".to_vec() }).await.unwrap();
    assert_eq!(get.into_inner().value.as_deref(), Some(&b"v1"[..]));

    // Error statuses travel with their code and message.
    let e = greeter
        .say_hello(HelloRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(e.message(), "name must not be empty");
    let e = kv.get(GetRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(e.message(), "key must not be empty");

    // 1,000 calls, 64 in flight on the one channel, each checked against its request:
    // 500 greetings, and 250 keys each put then read back.
    let next = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..64 {
        let (next, calls) = (next.clone(), calls.clone());
        let mut greeter = GreeterClient::new(ch.clone());
        let mut kv = KeyValueClient::new(ch.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= 750 {
                    break;
                }
                if n < 500 {
                    let name = format!("caller-{n}");
                    let r = greeter
                        .say_hello(HelloRequest { name: name.clone() })
                        .await
                        .unwrap();
                    assert_eq!(r.into_inner().message, format!("Hello {name}!"));
                    calls.fetch_add(1, Ordering::Relaxed);
                } else {
                    let key = format!("key-{n}").into_bytes();
                    let value = n.to_be_bytes().repeat(n % 7 + 1);
                    let r = kv
                        .put(PutRequest {
                            key: key.clone(),
                            value: value.clone(),
                        })
                        .await
                        .unwrap();
                    assert_eq!(r.into_inner().previous, None, "key-{n} was fresh");
                    let r = kv.get(GetRequest { key }).await.unwrap();
                    assert_eq!(r.into_inner().value, Some(value), "key-{n}");
                    calls.fetch_add(2, Ordering::Relaxed);
                }
            }
        }));
    }
    for w in workers {
        tokio::time::timeout(Duration::from_secs(120), w)
            .await
            .expect("1,000 calls complete within 2 minutes")
            .unwrap();
    }
    assert_eq!(calls.load(Ordering::Relaxed), 1000);
    // The store saw every put: 250 keys from the workers plus "k".
    let scan = kv
        .scan(ScanRequest {
            start_key: b"key-".to_vec(),
            end_key: b"key.".to_vec(),
            limit: 1000,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(scan.entries.len(), 250);
    assert!(scan.next_key.is_empty());

    // Clean shutdown: closing stdin is the child's signal.
    drop(child.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the child server shuts down within 30 s")
        .unwrap();
    let mut rest = Vec::new();
    while let Some(l) = lines.next_line().await.unwrap() {
        rest.push(l);
    }
    assert!(status.success(), "child exited with {status}: {rest:?}");
    assert!(
        rest.iter().any(|l| l.contains("SERVER STOPPED")),
        "serve_with_listener returned: {rest:?}"
    );
    // Its connection is gone: a new call fails instead of hanging.
    let e = tokio::time::timeout(
        Duration::from_secs(10),
        greeter.say_hello(HelloRequest {
            name: "late".into(),
        }),
    )
    .await
    .expect("a call to a stopped server ends")
    .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
}
