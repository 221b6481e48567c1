//! A server process paused for 2.5 s (SIGSTOP: a GC pause, swap, a debugger) with
//! calls in flight costs those calls time, not the connection: the RC retry budget
//! (about 4.3 s by default) outlasts the pause, and a call's deadline, not the
//! transport, decides when it gives up.

use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Request};
use tests::{path, serve_echo, ChildTest, Echo};
use tokio::io::AsyncReadExt;

const CHILD: &str = "RDMA_RPC_TEST_STALL_SERVER";
const PAUSE: Duration = Duration::from_millis(2500);

/// In the child: serve until stdin closes, printing the port and the pid first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a child process"]
async fn child_server() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let stop = async {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    };
    let (addr, task) = serve_echo(Server::builder(), stop).await;
    println!("PORT {} PID {}", addr.port(), std::process::id());
    task.await.unwrap();
}

fn signal(pid: &str, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, pid])
        .status()
        .expect("running kill")
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Stops process `pid` and returns once every thread of it has stopped.
///
/// `kill` returns as soon as SIGSTOP is queued; the group stop begins only when the
/// thread the kernel picked to take the signal next runs, and until then the other
/// threads run on. On a busy machine that took long enough for a call sent right
/// after `kill` to be answered by the "stopped" server (seen when these tests ran
/// side by side and so competed for the CPU).
async fn stop(pid: &str) {
    signal(pid, "-STOP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !all_threads_stopped(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} not stopped 10 s after SIGSTOP"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Whether every thread of `pid` is in state `T` (stopped), per /proc.
fn all_threads_stopped(pid: &str) -> bool {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("listing the threads");
    tasks.flatten().all(|t| {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            == Some("T")
    })
}

fn call(
    ch: &Channel,
    id: u64,
    timeout: Duration,
) -> tokio::task::JoinHandle<Result<u64, rpc_core::Status>> {
    let mut g = Grpc::new(ch.clone());
    tokio::spawn(async move {
        let mut req = Request::new(Echo {
            id,
            data: vec![1; 32],
        });
        req.set_timeout(timeout);
        Ok(g.unary::<Echo, Echo>(req, path("Echo"))
            .await?
            .into_inner()
            .id)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_across_a_paused_server_completes_late() {
    tests::init_tracing();
    let mut child = ChildTest::spawn("child_server", (CHILD, "1"));
    let line = child.read_tagged("PORT ").await;
    let (port, pid) = line.split_once(" PID ").expect("PORT p PID n");
    let ch = Channel::connect(format!("rdma://127.0.0.1:{port}"))
        .await
        .unwrap();
    assert_eq!(
        call(&ch, 1, Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap(),
        1
    );

    stop(pid).await;
    let t0 = Instant::now();
    let long = call(&ch, 2, Duration::from_secs(10));
    let short = call(&ch, 3, Duration::from_secs(1));
    // The pause itself is the scenario: the server process cannot run meanwhile.
    tokio::time::sleep(PAUSE).await;
    signal(pid, "-CONT");

    // The 1 s call ends at its deadline, DEADLINE_EXCEEDED, not UNAVAILABLE.
    let e = short.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    // The 10 s call completes once the server runs again, on the same connection.
    assert_eq!(long.await.unwrap().unwrap(), 2);
    assert!(t0.elapsed() >= PAUSE);
    let t1 = Instant::now();
    assert_eq!(
        call(&ch, 4, Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap(),
        4
    );
    assert!(t1.elapsed() < Duration::from_secs(3), "{:?}", t1.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_keepalive_finds_a_hung_server_and_the_channel_recovers_after() {
    tests::init_tracing();
    let mut child = ChildTest::spawn("child_server", (CHILD, "1"));
    let line = child.read_tagged("PORT ").await;
    let (port, pid) = line.split_once(" PID ").expect("PORT p PID n");
    let ch = rpc_core::transport::Endpoint::from_shared(format!("rdma://127.0.0.1:{port}"))
        .unwrap()
        .http2_keep_alive_interval(Duration::from_millis(200))
        .keep_alive_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    assert_eq!(
        call(&ch, 1, Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap(),
        1
    );

    stop(pid).await;
    let t0 = Instant::now();
    // A call with a long deadline, on a server that no longer runs: the keepalive,
    // not the deadline, ends it.
    let e = call(&ch, 2, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap_err();
    let took = t0.elapsed();
    signal(pid, "-CONT");
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("keepalive"), "{e:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    // The server runs again: the channel dials anew and answers.
    let t1 = Instant::now();
    loop {
        match call(&ch, 3, Duration::from_secs(5)).await.unwrap() {
            Ok(id) => break assert_eq!(id, 3),
            Err(e) if t1.elapsed() < Duration::from_secs(5) => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("no answer 5 s after the server resumed: {e:?}"),
        }
    }
}
