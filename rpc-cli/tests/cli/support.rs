//! A server on 127.0.0.1 (port 0) serving the example services, and the `rdma-rpc`
//! binary run against it.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

use examples::hello_world::greeter_server::{Greeter, GreeterServer};
use examples::hello_world::{HelloReply, HelloRequest};
use examples::kv::key_value_server::KeyValueServer;
use examples::kv_store::MemoryStore;
use examples::route_guide::RouteGuideService;
use examples::routeguide::route_guide_server::RouteGuideServer;
use rpc_core::transport::Server;
use rpc_core::{Request, Response, Status};

/// How long one run of the binary may take before the test fails.
const RUN_DEADLINE: Duration = Duration::from_secs(60);

/// A greeter that says who asked (`x-who` metadata), remembers every name it was
/// sent, and never answers the name `never` (for deadlines).
#[derive(Clone, Default)]
pub(crate) struct TestGreeter {
    pub(crate) names: Arc<Mutex<Vec<String>>>,
}

#[rpc_core::async_trait]
impl Greeter for TestGreeter {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        let who = request
            .metadata()
            .get("x-who")
            .and_then(|v| v.to_str().ok())
            .map(|who| format!(" (asked by {who})"))
            .unwrap_or_default();
        let name = request.into_inner().name;
        self.names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(name.clone());
        match name.as_str() {
            "" => Err(Status::invalid_argument("name must not be empty")),
            "never" => std::future::pending().await,
            _ => Ok(Response::new(HelloReply {
                message: format!("Hello {name}!{who}"),
            })),
        }
    }
}

/// Which reflection service a test server offers.
pub(crate) enum Reflection {
    None,
    V1,
    V1Alpha,
}

/// The example services on 127.0.0.1, stopped when dropped.
pub(crate) struct TestServer {
    pub(crate) addr: String,
    pub(crate) greeter: TestGreeter,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    /// Greeter, key-value store and route guide, with the v1 reflection service
    /// when `reflection`.
    pub(crate) fn start(reflection: bool) -> TestServer {
        TestServer::start_with(if reflection {
            Reflection::V1
        } else {
            Reflection::None
        })
    }

    /// Greeter, key-value store and route guide, with `reflection`.
    pub(crate) fn start_with(reflection: Reflection) -> TestServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let addr = format!("rdma://{}", listener.local_addr().expect("local address"));
        let greeter = TestGreeter::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = greeter.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("server runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                let builder = || {
                    rpc_reflection::server::Builder::configure()
                        .register_encoded_file_descriptor_set(examples::FILE_DESCRIPTOR_SET)
                        .with_service_name("helloworld.Greeter")
                        .with_service_name("kv.KeyValue")
                        .with_service_name("routeguide.RouteGuide")
                };
                let mut router = Server::builder()
                    .add_service(GreeterServer::new(served))
                    .add_service(KeyValueServer::new(MemoryStore::default()))
                    .add_service(RouteGuideServer::new(RouteGuideService::sample()));
                match reflection {
                    Reflection::None => {}
                    Reflection::V1 => {
                        router = router.add_service(builder().build_v1().expect("v1 reflection"));
                    }
                    Reflection::V1Alpha => {
                        let v1alpha = builder().build_v1alpha().expect("v1alpha reflection");
                        router = router.add_service(v1alpha);
                    }
                }
                router
                    .serve_with_listener(listener, async {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("serve");
            });
        });
        TestServer {
            addr,
            greeter,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The names the greeter was sent, in arrival order.
    pub(crate) fn names(&self) -> Vec<String> {
        self.greeter
            .names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a run of the binary printed, and its exit status.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `rdma-rpc ARGS` with `stdin` as its standard input; fails the test if it
/// takes longer than [`RUN_DEADLINE`].
pub(crate) fn rdma_rpc(args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdma-rpc"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rdma-rpc");
    let mut input = child.stdin.take().expect("piped stdin");
    let stdin = stdin.to_owned();
    // A writer of its own: a streaming call reads input while it writes output.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let (done, finished) = mpsc::channel();
    let id = child.id();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let output = match finished.recv_timeout(RUN_DEADLINE) {
        Ok(output) => output.expect("wait for rdma-rpc"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(id.to_string()).status();
            let stderr = finished
                .recv()
                .ok()
                .and_then(Result::ok)
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .unwrap_or_default();
            panic!("rdma-rpc {args:?} did not end within {RUN_DEADLINE:?}; its standard error:\n{stderr}");
        }
    };
    let _ = writer.join();
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Asserts a run succeeded and returns its standard output.
pub(crate) fn ok(run: Run) -> String {
    assert_eq!(run.code, 0, "rdma-rpc failed: {run:?}");
    assert_eq!(run.stderr, "", "rdma-rpc wrote to stderr: {run:?}");
    run.stdout
}

/// Asserts a run failed with `code` and exactly the one-line error `line`.
pub(crate) fn fails(run: Run, code: i32, line: &str) {
    assert_eq!(run.code, code, "exit status of {run:?}");
    assert_eq!(run.stderr, format!("{line}\n"), "stderr of {run:?}");
    assert_eq!(run.stdout, "", "stdout of {run:?}");
}

/// `proto/NAME` of the workspace.
pub(crate) fn proto(name: &str) -> String {
    format!("{}/../proto/{name}", env!("CARGO_MANIFEST_DIR"))
}
