//! A server run into its descriptor limit (a child process started with
//! `ulimit -n 64`, flooded with TCP connections it must accept, on its port and on
//! its soft device's, if it has one) backs off instead of spinning, says so at
//! `warn` about once a second, and serves a legitimate client again once the flood
//! has gone. Runs on verbs in the SoftRoCE VM suite too.

use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rpc_core::client::Grpc;
use rpc_core::transport::{Channel, Server};
use rpc_core::Request;
use tests::{path, serve_echo, Echo};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

const CHILD: &str = "RDMA_RPC_TEST_FD_SERVER";
/// The child's descriptor limit: what a server with default settings needs to
/// start, plus a few dozen.
const FD_LIMIT: u32 = 64;
/// Connections the flood opens to each listening port: each more than the server
/// can accept, and few enough that those it cannot fit a listen backlog (128), so
/// that no connect waits.
const FLOOD: usize = 60;
/// Accept failures logged during the episode the test watches.
const EPISODE_LINES: usize = 3;

/// In the child: serve until stdin closes, printing the port and pid first; logs
/// (`RUST_LOG`) go to stdout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child-process entry: its parent test runs it in a child process"]
async fn child_server() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    tests::init_tracing();
    let stop = async {
        let _ = tokio::io::stdin().read_to_end(&mut Vec::new()).await;
    };
    // The device the server would open by default, opened here to learn its port
    // (a soft device's: where RC QPs connect; a verbs device has none, 0).
    let dev = rpc_transport::Device::open_default_on([127, 0, 0, 1].into()).unwrap();
    let soft = dev
        .gid(1, 0)
        .ok()
        .and_then(|g| g.soft_addr())
        .map_or(0, |a| a.port());
    let (addr, task) = serve_echo(Server::builder().rdma_device(dev), stop).await;
    println!(
        "PORT {} SOFT {soft} PID {}",
        addr.port(),
        std::process::id()
    );
    task.await.unwrap();
}

/// User plus system CPU time of `pid` so far, from /proc (in clock ticks).
fn cpu_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("reading stat");
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of stat: 12 and 13 after the name.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The unit of /proc's CPU times (`sysconf(_SC_CLK_TCK)`), from `getconf`; where
/// there is none (the SoftRoCE VM's busybox guest), USER_HZ, which /proc reports in
/// whatever the kernel's own tick: 100 on every Linux architecture this runs on.
fn ticks_per_second() -> u64 {
    match std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().parse().unwrap(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 100,
        Err(e) => panic!("running getconf CLK_TCK: {e}"),
    }
}

fn open_fds(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("listing the child's descriptors")
        .count()
}

/// `more=N` of a rate-limited log line: how many failures it stands for beyond itself.
fn held_back(line: &str) -> u64 {
    let i = line
        .find("more=")
        .expect("the accept warning says how many it held back");
    line[i + 5..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

type Output = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

async fn next_line(out: &mut Output, what: &str) -> String {
    tokio::time::timeout(Duration::from_secs(30), out.next_line())
        .await
        .unwrap_or_else(|_| panic!("no {what} from the server within 30 s"))
        .expect("reading the server's output")
        .unwrap_or_else(|| panic!("the server exited before {what}"))
}

/// Seconds since midnight of a log line's timestamp (`...THH:MM:SS.ffffffZ ...`).
fn stamp(line: &str) -> f64 {
    let t = line.find('T').expect("a timestamped log line");
    let hms: Vec<f64> = line[t + 1..]
        .split('Z')
        .next()
        .unwrap()
        .split(':')
        .map(|x| x.parse().unwrap())
        .collect();
    hms[0] * 3600.0 + hms[1] * 60.0 + hms[2]
}

/// Seconds since midnight (UTC) now, as [`stamp`] counts.
fn now_of_day() -> f64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (t.as_secs() % 86_400) as f64 + f64::from(t.subsec_micros()) / 1e6
}

async fn call_once(port: &str) -> Result<u64, String> {
    let ch = Channel::connect(format!("rdma://127.0.0.1:{port}"))
        .await
        .map_err(|e| e.to_string())?;
    let mut req = Request::new(Echo {
        id: 9,
        data: vec![1; 32],
    });
    req.set_timeout(Duration::from_secs(5));
    let r = Grpc::new(ch).unary::<Echo, Echo>(req, path("Echo")).await;
    r.map(|r| r.into_inner().id).map_err(|e| format!("{e:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_out_of_descriptors_backs_off_logs_rarely_and_recovers() {
    tests::init_tracing();
    let exe = std::env::current_exe().expect("path of the running test binary");
    // The limit is set in the child's shell before it becomes the server.
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {FD_LIMIT} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args([
            "--exact",
            "child_server",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("RUST_LOG", "rpc_core=warn")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting the server child");
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let (port, soft, pid) = loop {
        let l = next_line(&mut out, "port").await;
        if let Some(i) = l.find("PORT ") {
            let w: Vec<&str> = l[i..].split_whitespace().collect();
            break (
                w[1].to_string(),
                w[3].parse::<u16>().unwrap(),
                w[5].to_string(),
            );
        }
    };
    // Served once first: the server has finished starting (it opens its queues
    // after the port is bound) before the flood takes its descriptors.
    assert_eq!(call_once(&port).await, Ok(9));
    let baseline = open_fds(&pid);
    assert!(
        baseline < FD_LIMIT as usize - 10,
        "{baseline} descriptors open at start: raise FD_LIMIT"
    );

    // The flood: connections that never speak, to the RPC port and to the soft
    // device's (where RC QPs connect; a verbs device, as in the VM suite, has no
    // port). The server accepts them until it has no descriptor left; the rest wait
    // in the listen backlogs.
    let flood: Vec<TcpStream> = [port.parse::<u16>().unwrap(), soft]
        .into_iter()
        .filter(|&p| p != 0)
        .flat_map(|p| (0..FLOOD).map(move |_| TcpStream::connect(("127.0.0.1", p)).unwrap()))
        .collect();
    while !next_line(&mut out, "an accept warning")
        .await
        .contains("accept failed")
    {}
    let at_limit = open_fds(&pid);

    // The episode: the next few warnings. Meanwhile the server must idle (a loop
    // retrying accept at once would burn a core) and log about once a second.
    // Warnings already written while the flood was being opened are skipped: the
    // episode starts now, by the clock the server stamps its lines with.
    let (t0, cpu0) = (Instant::now(), cpu_ticks(&pid));
    let since = now_of_day();
    let mut warnings = Vec::new();
    while warnings.len() <= EPISODE_LINES {
        let l = next_line(&mut out, "further accept warnings").await;
        // (Later than `since`, a midnight between them included.)
        if l.contains("accept failed") && (stamp(&l) - since + 86_400.0) % 86_400.0 < 3600.0 {
            warnings.push(l);
        }
    }
    let (wall, cpu) = (t0.elapsed(), cpu_ticks(&pid) - cpu0);
    let cpu = Duration::from_millis(cpu * 1000 / ticks_per_second());
    // Gaps between warnings by the server's own clock (a midnight wraps once).
    let gaps: Vec<f64> = warnings
        .windows(2)
        .map(|w| (stamp(&w[1]) - stamp(&w[0]) + 86_400.0) % 86_400.0)
        .collect();
    let held: Vec<u64> = warnings.iter().map(|l| held_back(l)).collect();
    eprintln!(
        "fds: {baseline} at start, {at_limit} at the limit ({FD_LIMIT}); episode of \
         {wall:?}: server CPU {cpu:?}, warnings {gaps:?} s apart, holding back {held:?}"
    );
    assert!(at_limit + 4 >= FD_LIMIT as usize, "{at_limit} fds open");
    // Spinning would cost about one CPU-second per second of the episode.
    assert!(cpu * 4 < wall, "server used {cpu:?} of CPU in {wall:?}");
    // One line per second at most, each standing for a handful of backed-off
    // retries (the backoff grows to 1 s), not a storm.
    assert!(gaps.iter().all(|&g| g >= 0.95), "warning gaps {gaps:?} s");
    assert!(held.iter().all(|&n| n <= 10), "held back {held:?}");

    // The flood leaves; a legitimate client is served again.
    drop(flood);
    let t1 = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match call_once(&port).await {
            Ok(id) => break assert_eq!(id, 9),
            Err(e) if Instant::now() < deadline => {
                eprintln!("not served yet: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("not served within 20 s of the flood leaving: {e}"),
        }
    }
    let after = open_fds(&pid);
    eprintln!(
        "served {:?} after the flood left; fds then: {after}",
        t1.elapsed()
    );

    drop(child.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the server stops when its stdin closes")
        .unwrap();
    assert!(status.success(), "server child: {status}");
}
