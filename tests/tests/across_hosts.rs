//! Two hosts without RDMA NICs, default devices on both ends: a server in one
//! network namespace serving `0.0.0.0`, a client in another reaching it over a veth
//! pair, calls over RC and UD. Nothing is built by hand: the server's soft device
//! serves the address it listens on, the client's binds its end of the route, and
//! each QP endpoint names the address the handshake connection used.
//!
//! Needs root (CI has it) and `ip` (iproute2). Without them the test fails, saying
//! why: it never skips. Traffic stays inside the namespaces it creates.

use std::process::{Command, Stdio};
use std::time::Duration;

use rpc_core::client::Grpc;
use rpc_core::transport::{Endpoint, Server};
use rpc_core::Request;
use tests::{path, Echo, EchoService};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

const SERVER: &str = "RDMA_RPC_TEST_ACROSS_HOSTS_SERVER";
const CLIENT: &str = "RDMA_RPC_TEST_ACROSS_HOSTS_CLIENT";
const SERVER_IP: &str = "10.99.0.1";
const CLIENT_IP: &str = "10.99.0.2";

/// Runs `ip ARGS`, panicking with its stderr (and the likely reason) on failure.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip` (install iproute2): {e}"));
    assert!(
        out.status.success(),
        "`ip {}` failed (this test needs root to create network namespaces): {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Two namespaces joined by a veth pair, removed when dropped (also on a panic).
struct Hosts {
    server: String,
    client: String,
}

impl Hosts {
    fn create() -> Hosts {
        let id = std::process::id();
        let hosts = Hosts {
            server: format!("rrpc-srv-{id}"),
            client: format!("rrpc-cli-{id}"),
        };
        // Registered before anything is created, so a half-built pair is removed too.
        let (va, vb) = (format!("rrs{id}"), format!("rrc{id}"));
        ip(&["netns", "add", &hosts.server]);
        ip(&["netns", "add", &hosts.client]);
        ip(&[
            "link",
            "add",
            &va,
            "netns",
            &hosts.server,
            "type",
            "veth",
            "peer",
            "name",
            &vb,
            "netns",
            &hosts.client,
        ]);
        for (ns, dev, addr) in [
            (&hosts.server, &va, SERVER_IP),
            (&hosts.client, &vb, CLIENT_IP),
        ] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        hosts
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and so the pair.
        for ns in [&self.server, &self.client] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// This test binary, re-executed inside namespace `ns` to run only entry `test`.
fn spawn_in(ns: &str, test: &str, env: &[(&str, String)]) -> tokio::process::Child {
    let exe = std::env::current_exe().expect("path of the running test binary");
    let mut cmd = tokio::process::Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .arg(exe)
        .args([
            "--exact",
            test,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("running `ip netns exec`")
}

/// The rest of the first line of `out` containing `tag`, within 30 s.
async fn read_tagged(
    out: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    tag: &str,
) -> String {
    let read = async {
        while let Some(l) = out.next_line().await.expect("reading a child's output") {
            if let Some(i) = l.find(tag) {
                return l[i + tag.len()..].trim().to_string();
            }
        }
        panic!("the child exited before printing {tag:?}");
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .unwrap_or_else(|_| panic!("no {tag:?} from the child within 30 s"))
}

/// In the server namespace: serve on every address with default settings until
/// stdin closes, printing the port first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a network namespace"]
async fn server_host() {
    if std::env::var_os(SERVER).is_none() {
        return;
    }
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    println!("PORT {}", listener.local_addr().unwrap().port());
    let stop = async {
        let _ = tokio::io::stdin().read_to_end(&mut Vec::new()).await;
    };
    Server::builder()
        .add_service(EchoService)
        .serve_with_listener(listener, stop)
        .await
        .unwrap();
}

/// In the client namespace: one unary call over RC, one over UD, default settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a network namespace"]
async fn client_host() {
    let Some(uri) = std::env::var_os(CLIENT) else {
        return;
    };
    let uri = uri.into_string().unwrap();
    for (id, ud) in [(1u64, false), (2, true)] {
        let ch = Endpoint::from_shared(uri.clone())
            .unwrap()
            .ud(ud)
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connect (ud {ud}) to {uri}: {e:?}"));
        let mut g = Grpc::new(ch);
        let mut req = Request::new(Echo {
            id,
            data: vec![7; 100],
        });
        req.set_timeout(Duration::from_secs(10));
        let got = g
            .unary::<Echo, Echo>(req, path("Echo"))
            .await
            .unwrap_or_else(|e| panic!("unary (ud {ud}): {e:?}"))
            .into_inner();
        assert_eq!((got.id, got.data), (id, vec![7; 100]));
        println!("CALLED {}", if ud { "UD" } else { "RC" });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_another_host_calls_over_rc_and_ud_with_default_devices() {
    tests::init_tracing();
    let hosts = Hosts::create();
    let mut server = spawn_in(&hosts.server, "server_host", &[(SERVER, "1".into())]);
    let mut server_out = BufReader::new(server.stdout.take().unwrap()).lines();
    let port = read_tagged(&mut server_out, "PORT ").await;

    let uri = format!("rdma://{SERVER_IP}:{port}");
    let mut client = spawn_in(&hosts.client, "client_host", &[(CLIENT, uri)]);
    let mut client_out = BufReader::new(client.stdout.take().unwrap()).lines();
    assert_eq!(read_tagged(&mut client_out, "CALLED ").await, "RC");
    assert_eq!(read_tagged(&mut client_out, "CALLED ").await, "UD");
    let status = tokio::time::timeout(Duration::from_secs(30), client.wait())
        .await
        .expect("the client exits")
        .unwrap();
    assert!(status.success(), "client child: {status}");

    drop(server.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(30), server.wait())
        .await
        .expect("the server stops when its stdin closes")
        .unwrap();
    assert!(status.success(), "server child: {status}");
}
