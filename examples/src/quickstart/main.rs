//! One command that shows rdma-rpc working: a server (greeter + key-value store) and
//! a client on the default RDMA provider (soft unless built with `rdma` and a NIC is
//! present), a few calls, an error, and a clean shutdown.

use std::time::{Duration, Instant};

use examples::greeter::MyGreeter;
use examples::hello_world::greeter_client::GreeterClient;
use examples::hello_world::greeter_server::GreeterServer;
use examples::hello_world::HelloRequest;
use examples::kv::key_value_client::KeyValueClient;
use examples::kv::key_value_server::KeyValueServer;
use examples::kv::{GetRequest, PutRequest, ScanRequest};
use examples::kv_store::MemoryStore;
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    examples::init_tracing();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // Port 0: the OS picks a free port, and the address is known before serving.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = format!("rdma://{}", listener.local_addr()?);
    println!("server: listening on {addr}");
    let server = Server::builder()
        .add_service(GreeterServer::new(MyGreeter))
        .add_service(KeyValueServer::new(MemoryStore::default()));
    let serving = tokio::spawn(server.serve_with_listener(listener, async {
        let _ = stop_rx.await;
    }));

    let channel = Channel::connect(addr.clone()).await?;
    println!("client: connected to {addr}");
    let mut greeter = GreeterClient::new(channel.clone());
    let mut kv = KeyValueClient::new(channel);

    let t = Instant::now();
    let reply = greeter
        .say_hello(HelloRequest {
            name: "RDMA".into(),
        })
        .await?;
    println!(
        "client: SayHello(\"RDMA\") -> {:?} in {:?}",
        reply.get_ref().message,
        t.elapsed()
    );

    let err = greeter
        .say_hello(HelloRequest {
            name: String::new(),
        })
        .await
        .unwrap_err();
    println!(
        "client: SayHello(\"\") -> {:?}: {}",
        err.code(),
        err.message()
    );

    for (k, v) in [
        ("apple", "red"),
        ("banana", "yellow"),
        ("cherry", "dark red"),
    ] {
        kv.put(PutRequest {
            key: k.into(),
            value: v.into(),
        })
        .await?;
    }
    println!("client: Put 3 entries");
    let got = kv
        .get(GetRequest {
            key: b"banana".to_vec(),
        })
        .await?
        .into_inner();
    println!(
        "client: Get(\"banana\") -> {:?}",
        got.value.map(|v| String::from_utf8_lossy(&v).into_owned())
    );
    let scan = kv
        .scan(ScanRequest {
            start_key: vec![],
            end_key: vec![],
            limit: 0,
        })
        .await?
        .into_inner();
    let keys: Vec<_> = scan
        .entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.key).into_owned())
        .collect();
    println!("client: Scan -> {keys:?}");

    let mut timed = Request::new(HelloRequest {
        name: "deadline".into(),
    });
    timed.set_timeout(Duration::from_secs(5));
    greeter.say_hello(timed).await?;
    let n = 1000;
    let t = Instant::now();
    for i in 0..n {
        greeter
            .say_hello(HelloRequest {
                name: format!("#{i}"),
            })
            .await?;
    }
    let per_call = t.elapsed() / n;
    println!("client: {n} sequential SayHello calls, {per_call:?} per call");

    let _ = stop_tx.send(());
    serving.await??;
    println!("server: stopped");
    Ok(())
}
