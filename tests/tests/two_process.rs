//! End to end across two processes with generated code: the server (greeter + kv) runs
//! as a child process (this test binary re-executed with an environment variable), the
//! parent calls it through `GreeterClient`/`KeyValueClient`, then shuts it down by
//! closing its stdin and expects a clean exit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rpc_core::transport::{Channel, Server};
// The server runs the services the examples ship (their own generated code); the
// client side uses this crate's, so the two only share the wire.
use examples::greeter::MyGreeter;
use examples::hello_world::greeter_server::GreeterServer;
use examples::kv::key_value_server::KeyValueServer;
use examples::kv_store::MemoryStore;
use rpc_core::Code;
use tests::hello_world::greeter_client::GreeterClient;
use tests::hello_world::HelloRequest;
use tests::kv::key_value_client::KeyValueClient;
use tests::kv::{GetRequest, PutRequest, ScanRequest};
use tests::ChildTest;
use tokio::io::AsyncReadExt;

const CHILD: &str = "RDMA_RPC_TEST_TWO_PROCESS_SERVER";

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
        .add_service(GreeterServer::new(MyGreeter))
        .add_service(KeyValueServer::new(MemoryStore::default()))
        .serve_with_listener(listener, stop)
        .await
        .expect("server runs and shuts down cleanly");
    println!("SERVER STOPPED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_clients_call_a_server_in_another_process() {
    tests::init_tracing();
    let mut child = ChildTest::spawn("child_server", (CHILD, "1"));
    let addr = child.read_tagged("ADDR ").await;

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
    drop(child.child.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(30), child.child.wait())
        .await
        .expect("the child server shuts down within 30 s")
        .unwrap();
    let rest = child.rest().await;
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
