//! Shared helpers for rdma-rpc's integration tests: a hand-written prost message, a
//! hand-implemented service (no codegen needed), servers that stop by themselves, and
//! the code generated from `proto/helloworld.proto` and `proto/kv.proto` (`build.rs`).
#![forbid(unsafe_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::transport::{Router, Server};
use rpc_core::{Request, Response, Status};

/// `proto/helloworld.proto`: `GreeterClient`, `greeter_server::Greeter`.
#[allow(missing_docs, unreachable_pub)]
pub mod hello_world {
    rpc_core::include_proto!("helloworld");
}

/// `proto/kv.proto`: `KeyValueClient`, `key_value_server::KeyValue`.
#[allow(missing_docs, unreachable_pub)]
pub mod kv {
    rpc_core::include_proto!("kv");
}

pub mod raw_rc;
pub mod raw_rc_server;
pub mod raw_stream;

static ABORTED: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static STARTED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Whether a `Sleep` handler for `millis` has started.
pub fn sleep_started(millis: u64) -> bool {
    STARTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&millis)
}

/// Records a `Sleep` handler dropped before it finished (stopped by the server).
struct AbortWitness(u64);

impl Drop for AbortWitness {
    fn drop(&mut self) {
        ABORTED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.0);
    }
}

/// Whether a `Sleep` handler for `millis` was stopped before it finished.
pub fn sleep_was_aborted(millis: u64) -> bool {
    ABORTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&millis)
}

/// The test message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Echo {
    /// Identifies the call (the reply must carry the request's).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Payload of any size.
    #[prost(bytes = "vec", tag = "2")]
    pub data: Vec<u8>,
}

/// A message whose field 1 has the wrong wire type for [`Echo`]: it does not decode.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NotEcho {
    /// Bytes where `Echo` has a varint.
    #[prost(bytes = "vec", tag = "1")]
    pub junk: Vec<u8>,
}

/// `test.Echo`: `Echo` returns the request, `Sleep` waits `id` milliseconds first
/// (a slow handler), `Deadline` returns the time left it saw, in milliseconds, `Meta`
/// replies with the request's metadata (or fails with it when it has a `fail` key).
#[derive(Debug, Clone, Default)]
pub struct EchoService;

impl NamedService for EchoService {
    const NAME: &'static str = "test.Echo";
}

/// A `test.Echo` service whose every call `f` answers: for a test that needs a
/// handler of its own (one that reports what it saw, or waits for the test).
#[derive(Clone)]
pub struct EchoFn<F>(pub F);

impl<F> NamedService for EchoFn<F> {
    const NAME: &'static str = "test.Echo";
}

impl<F> tower::Service<ServerCall> for EchoFn<F>
where
    F: FnMut(ServerCall) -> BoxFuture<ServerReply>,
{
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        (self.0)(call)
    }
}

/// Full path of a method of [`EchoService`].
pub fn path(method: &str) -> &'static str {
    match method {
        "Echo" => "/test.Echo/Echo",
        "Sleep" => "/test.Echo/Sleep",
        "Deadline" => "/test.Echo/Deadline",
        "Meta" => "/test.Echo/Meta",
        "Nope" => "/test.Echo/Nope",
        "Other" => "/test.Other/Echo",
        _ => panic!("unknown test method {method}"),
    }
}

impl tower::Service<ServerCall> for EchoService {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        Box::pin(async move {
            let method = call.method().to_string();
            let reply = |m: Echo| Ok(Response::new(ReplyBody::message(m)));
            match method.as_str() {
                "Echo" => reply(call.into_request::<Echo>()?.into_inner()),
                "Sleep" => {
                    let m = call.into_request::<Echo>()?.into_inner();
                    STARTED.lock().unwrap_or_else(|e| e.into_inner()).push(m.id);
                    let guard = AbortWitness(m.id);
                    tokio::time::sleep(Duration::from_millis(m.id)).await;
                    std::mem::forget(guard);
                    reply(m)
                }
                "Deadline" => {
                    let req: Request<Echo> = call.into_request()?;
                    let ms = req.timeout().map_or(0, |t| t.as_millis() as u64);
                    reply(Echo {
                        id: ms,
                        data: vec![],
                    })
                }
                "Meta" => {
                    // Replies with the request's metadata; a `fail` key turns it into
                    // an error status carrying the same metadata.
                    let req: Request<Echo> = call.into_request()?;
                    let (md, _, m) = req.into_parts();
                    if md.get("fail").is_some() {
                        let mut s = Status::permission_denied("asked to fail");
                        *s.metadata_mut() = md;
                        return Err(s);
                    }
                    let mut r = Response::new(ReplyBody::message(m));
                    *r.metadata_mut() = md;
                    Ok(r)
                }
                m => Err(Status::unimplemented(format!("unknown method {m}"))),
            }
        })
    }
}

/// Serves [`EchoService`] on an ephemeral port of 127.0.0.1 until `stop` completes.
pub async fn serve_echo(
    builder: Server,
    stop: impl Future<Output = ()> + Send + 'static,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let task = tokio::spawn(async move {
        builder
            .add_service(EchoService)
            .serve_with_listener(listener, stop)
            .await
            .expect("server runs");
    });
    (addr, task)
}

/// Serves `router` on an ephemeral port of 127.0.0.1 until the returned sender is
/// used or dropped.
pub async fn serve_router<L>(router: Router<L>) -> (SocketAddr, tokio::sync::oneshot::Sender<()>)
where
    L: tower::Layer<rpc_core::service::Routes> + Send + 'static,
    L::Service: rpc_core::server::CallService,
{
    init_tracing();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        router
            .serve_with_listener(listener, async move {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
    });
    (addr, stop)
}

/// RNR NAKs the process's default device has sent so far (in a test process the
/// server and its clients share it), or `None` when that device is not the soft
/// provider (verbs, in the VM suite), which keeps no such count.
pub fn soft_rnr_naks() -> Option<u64> {
    rpc_transport::msg::open_device(None)
        .expect("the default device opens")
        .soft_stats()
        .map(|s| s.rc_rnr_naks)
}

/// `len` bytes that differ with `seed` and along the body (a misplaced or stale
/// byte shows), for bodies checked byte for byte.
pub fn seeded(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A child process running one `#[ignore]`d entry test of this same test binary.
pub struct ChildTest {
    /// The process (killed when dropped); its stdin is piped, so dropping
    /// `child.stdin` is an end-of-file the child can wait for.
    pub child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl ChildTest {
    /// Re-executes the running test binary to run only `test` (an `#[ignore]`d child
    /// entry), with `env.0 = env.1` set so that it knows it is the child.
    pub fn spawn(test: &str, env: (&str, &str)) -> ChildTest {
        let exe = std::env::current_exe().expect("path of the running test binary");
        let mut child = tokio::process::Command::new(exe)
            .args([
                "--exact",
                test,
                "--include-ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(env.0, env.1)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("re-executing the test binary");
        let stdout = child.stdout.take().expect("stdout is piped");
        let lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        ChildTest { child, lines }
    }

    /// The rest of the first line of the child's output that contains `tag` (libtest
    /// may print `test NAME ... ` before the child's own text on the same line).
    ///
    /// # Panics
    /// If the child exits first, or prints no such line within 30 s.
    pub async fn read_tagged(&mut self, tag: &str) -> String {
        let read = async {
            while let Some(l) = self
                .lines
                .next_line()
                .await
                .expect("reading the child's output")
            {
                if let Some(i) = l.find(tag) {
                    return l[i + tag.len()..].trim().to_string();
                }
            }
            panic!("the child exited before printing {tag:?}");
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .unwrap_or_else(|_| panic!("the child printed no {tag:?} within 30 s"))
    }

    /// Every remaining line of the child's output, once it has closed its stdout.
    pub async fn rest(&mut self) -> Vec<String> {
        let mut rest = Vec::new();
        while let Some(l) = self
            .lines
            .next_line()
            .await
            .expect("reading the child's output")
        {
            rest.push(l);
        }
        rest
    }
}
