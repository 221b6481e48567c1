//! 64-byte RC ping-pong over two soft devices, next to a raw TCP ping-pong over
//! loopback measured in the same run. Both sides busy-poll.
//!
//! `cargo run --release -p rpc-transport --example soft_pingpong [iters] [name filter]`
//! runs: raw TCP (two threads), soft RC (two threads, two processes), soft UD (two
//! threads; the payload sits after the 40-byte GRH area on receive), and event-driven
//! variants under tokio (`poll_async` against tokio's `TcpStream`).
//!
//! A third argument `--count` prints only how many round trips each made, without
//! sorting the samples: `scripts/callgrind-per-call` counts the instructions of the
//! event-driven soft RC ping-pong that way, as the floor the provider sets under
//! rdma-rpc (sorting grows faster than the run, so it would not cancel out).
//!
//! Across network namespaces: `SOFT_BIND` is the address this process's soft devices
//! bind, and `SOFT_CHILD_WRAP` a command prefix for the child process, e.g.
//! `SOFT_BIND=10.77.0.1 SOFT_CHILD_WRAP="ip netns exec softB env SOFT_BIND=10.77.0.2"`
//! run inside namespace `softA`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rpc_transport::{
    AccessFlags, AhAttr, Device, QpEndpoint, QpInitAttr, QpType, RecvWr, SendFlags, SendOp, SendWr,
    SoftConfig, UdDest, WorkCompletion,
};

const SIZE: usize = 64;
const WARMUP: usize = 2_000;
const RECVS: u64 = 16;

fn report(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let p = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)].as_secs_f64() * 1e6;
    println!(
        "{name:<24} p50 {:7.1} us   p90 {:7.1} us   p99 {:7.1} us   (n={})",
        p(0.5),
        p(0.9),
        p(0.99),
        v.len()
    );
}

/// One side of the soft ping-pong; the client returns its RTT samples.
fn soft_side(
    client: bool,
    iters: usize,
    tx: impl FnOnce(QpEndpoint),
    rx: impl FnOnce() -> QpEndpoint,
) -> Vec<Duration> {
    let bind =
        std::env::var("SOFT_BIND").map_or(std::net::Ipv4Addr::LOCALHOST, |b| b.parse().unwrap());
    let dev = Device::open_soft(SoftConfig {
        bind,
        ..SoftConfig::default()
    })
    .unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let mr = pd.alloc_mr(64 * 1024, AccessFlags::LOCAL_WRITE).unwrap();
    let me = qp.endpoint(0).unwrap();
    tx(me);
    let peer = rx();
    qp.connect_rc(&peer, 0, AccessFlags::empty()).unwrap();
    let post_recv = |i: u64| {
        let sge = [mr.sge(SIZE * (1 + i as usize % RECVS as usize), SIZE as u32)];
        // SAFETY: the MR lives until the end of this function, and the slot is only
        // read by the device until its completion.
        unsafe {
            qp.post_recv(&[RecvWr {
                wr_id: i,
                sg_list: &sge,
            }])
        }
        .unwrap();
    };
    for i in 0..RECVS {
        post_recv(i);
    }
    let sge = [mr.sge(0, SIZE as u32)];
    let mut wc = [WorkCompletion::default(); 16];
    let mut samples = Vec::with_capacity(iters);
    let mut sent = 0u64;
    let mut send = || {
        // Selective signaling: one completion per 32 sends frees the send queue.
        let mut flags = SendFlags::INLINE;
        if sent % 32 == 31 {
            flags |= SendFlags::SIGNALED;
        }
        sent += 1;
        // SAFETY: inline payload, copied during the call.
        unsafe { qp.post_send(&[SendWr::new(sent, SendOp::Send, &sge).flags(flags)]) }.unwrap();
    };
    let mut wait_recv = || loop {
        let n = cq.poll(&mut wc).unwrap();
        let mut got = None;
        for w in &wc[..n] {
            assert!(w.is_ok(), "{w:?}");
            if w.opcode == rpc_transport::WcOpcode::Recv {
                got = Some(w.wr_id);
            }
        }
        if let Some(id) = got {
            return id;
        }
    };
    for i in 0..WARMUP + iters {
        if client {
            let t = Instant::now();
            send();
            let id = wait_recv();
            if i >= WARMUP {
                samples.push(t.elapsed());
            }
            post_recv(id);
        } else {
            let id = wait_recv();
            post_recv(id);
            send();
        }
    }
    // Let the last ACKs out before the device goes away.
    let until = Instant::now() + Duration::from_millis(20);
    while Instant::now() < until {
        let _ = cq.poll(&mut wc);
    }
    samples
}

/// One side of a UD ping-pong; the client returns its RTT samples.
fn ud_side(
    client: bool,
    iters: usize,
    tx: impl FnOnce(QpEndpoint),
    rx: impl FnOnce() -> QpEndpoint,
) -> Vec<Duration> {
    let dev = Device::open_soft(SoftConfig::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
        .unwrap();
    let mr = pd.alloc_mr(64 * 1024, AccessFlags::LOCAL_WRITE).unwrap();
    qp.activate_ud(0x5eed, 0).unwrap();
    let slot = 40 + SIZE;
    let post_recv = |i: u64| {
        let sge = [mr.sge(slot * (1 + i as usize % RECVS as usize), slot as u32)];
        // SAFETY: as in `soft_side`.
        unsafe {
            qp.post_recv(&[RecvWr {
                wr_id: i,
                sg_list: &sge,
            }])
        }
        .unwrap();
    };
    // Receives first: a datagram arriving before them would be dropped, as UD does.
    for i in 0..RECVS {
        post_recv(i);
    }
    tx(qp.endpoint(0).unwrap());
    let peer = rx();
    let ah = pd.create_ah(&AhAttr::from_endpoint(&peer, 0)).unwrap();
    let sge = [mr.sge(0, SIZE as u32)];
    let dest = UdDest {
        ah: &ah,
        remote_qpn: peer.qpn,
        remote_qkey: 0x5eed,
    };
    let mut wc = [WorkCompletion::default(); 16];
    let mut samples = Vec::with_capacity(iters);
    let send = |n: u64| {
        let wr = SendWr::new(n, SendOp::Send, &sge)
            .flags(SendFlags::INLINE | SendFlags::SIGNALED)
            .ud(dest);
        // SAFETY: inline payload, copied during the call.
        unsafe { qp.post_send(&[wr]) }.unwrap();
    };
    let mut wait_recv = || loop {
        let n = cq.poll(&mut wc).unwrap();
        if let Some(w) = wc[..n]
            .iter()
            .find(|w| w.opcode == rpc_transport::WcOpcode::Recv)
        {
            return w.wr_id;
        }
    };
    for i in 0..WARMUP + iters {
        if client {
            let t = Instant::now();
            send(i as u64);
            let id = wait_recv();
            if i >= WARMUP {
                samples.push(t.elapsed());
            }
            post_recv(id);
        } else {
            let id = wait_recv();
            post_recv(id);
            send(i as u64);
        }
    }
    samples
}

/// One ping-pong side in this thread, the other in a second thread, exchanging their
/// endpoints over channels.
type Endpoints = (
    Box<dyn FnOnce(QpEndpoint) + Send>,
    Box<dyn FnOnce() -> QpEndpoint + Send>,
);

fn two_threads(iters: usize, side: fn(bool, usize, Endpoints) -> Vec<Duration>) -> Vec<Duration> {
    let (tx_a, rx_b) = mpsc::channel();
    let (tx_b, rx_a) = mpsc::channel();
    let server = std::thread::spawn(move || {
        let ends: Endpoints = (
            Box::new(move |e| tx_b.send(e).unwrap()),
            Box::new(move || rx_b.recv().unwrap()),
        );
        side(false, iters, ends)
    });
    let ends: Endpoints = (
        Box::new(move |e| tx_a.send(e).unwrap()),
        Box::new(move || rx_a.recv().unwrap()),
    );
    let s = side(true, iters, ends);
    server.join().unwrap();
    s
}

fn ud_threads(iters: usize) -> Vec<Duration> {
    two_threads(iters, |client, n, (tx, rx)| ud_side(client, n, tx, rx))
}

/// RC ping-pong where both sides sleep in `poll_async` between messages.
fn soft_async(iters: usize) -> Vec<Duration> {
    let side = |client: bool, tx: mpsc::Sender<QpEndpoint>, rx: mpsc::Receiver<QpEndpoint>| {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let dev = Device::open_soft(SoftConfig::default()).unwrap();
            let pd = dev.alloc_pd().unwrap();
            let cq = dev.create_cq(256).unwrap();
            let qp = pd
                .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
                .unwrap();
            let mr = pd.alloc_mr(64 * 1024, AccessFlags::LOCAL_WRITE).unwrap();
            tx.send(qp.endpoint(0).unwrap()).unwrap();
            qp.connect_rc(&rx.recv().unwrap(), 0, AccessFlags::empty())
                .unwrap();
            let post_recv = |i: u64| {
                let sge = [mr.sge(SIZE * (1 + i as usize % RECVS as usize), SIZE as u32)];
                // SAFETY: as in `soft_side`.
                unsafe {
                    qp.post_recv(&[RecvWr {
                        wr_id: i,
                        sg_list: &sge,
                    }])
                }
                .unwrap();
            };
            for i in 0..RECVS {
                post_recv(i);
            }
            let sge = [mr.sge(0, SIZE as u32)];
            let send = |n: u64| {
                let flags = if n % 32 == 31 {
                    SendFlags::INLINE | SendFlags::SIGNALED
                } else {
                    SendFlags::INLINE
                };
                // SAFETY: inline payload, copied during the call.
                unsafe { qp.post_send(&[SendWr::new(n, SendOp::Send, &sge).flags(flags)]) }
                    .unwrap();
            };
            rt.block_on(async {
                let mut wc = [WorkCompletion::default(); 16];
                let mut samples = Vec::with_capacity(iters);
                for i in 0..(WARMUP + iters) as u64 {
                    let t = Instant::now();
                    if client {
                        send(i);
                    }
                    let id = loop {
                        let n = cq.poll_async(&mut wc).await.unwrap();
                        if let Some(w) = wc[..n]
                            .iter()
                            .find(|w| w.opcode == rpc_transport::WcOpcode::Recv)
                        {
                            break w.wr_id;
                        }
                    };
                    post_recv(id);
                    if client {
                        if i >= WARMUP as u64 {
                            samples.push(t.elapsed());
                        }
                    } else {
                        send(i);
                    }
                }
                // Let the last ACKs out before the device goes away.
                let _ =
                    tokio::time::timeout(Duration::from_millis(20), cq.poll_async(&mut wc)).await;
                samples
            })
        })
    };
    let (tx_a, rx_b) = mpsc::channel();
    let (tx_b, rx_a) = mpsc::channel();
    let server = side(false, tx_b, rx_b);
    let client = side(true, tx_a, rx_a);
    let s = client.join().unwrap();
    server.join().unwrap();
    s
}

/// The same under tokio over TCP.
fn tcp_async(iters: usize) -> Vec<Duration> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::from_std({
                l.set_nonblocking(true).unwrap();
                l
            })
            .unwrap();
            let (mut s, _) = l.accept().await.unwrap();
            s.set_nodelay(true).unwrap();
            let mut buf = [0u8; SIZE];
            for _ in 0..WARMUP + iters {
                s.read_exact(&mut buf).await.unwrap();
                s.write_all(&buf).await.unwrap();
            }
        })
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let v = rt.block_on(async {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.set_nodelay(true).unwrap();
        let mut buf = [0u8; SIZE];
        let mut v = Vec::with_capacity(iters);
        for i in 0..WARMUP + iters {
            let t = Instant::now();
            c.write_all(&buf).await.unwrap();
            c.read_exact(&mut buf).await.unwrap();
            if i >= WARMUP {
                v.push(t.elapsed());
            }
        }
        v
    });
    server.join().unwrap();
    v
}

fn soft_threads(iters: usize) -> Vec<Duration> {
    two_threads(iters, |client, n, (tx, rx)| soft_side(client, n, tx, rx))
}

fn soft_processes(iters: usize) -> Vec<Duration> {
    let exe = std::env::current_exe()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let wrap = std::env::var("SOFT_CHILD_WRAP").unwrap_or_default();
    let mut argv: Vec<String> = wrap.split_whitespace().map(String::from).collect();
    argv.extend([exe, "--child".into(), iters.to_string()]);
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut input = child.stdin.take().unwrap();
    let s = soft_side(
        true,
        iters,
        move |e| writeln!(input, "{e}").unwrap(),
        move || {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            line.trim().parse().unwrap()
        },
    );
    child.wait().unwrap();
    s
}

fn child(iters: usize) {
    let stdin = std::io::stdin();
    soft_side(
        false,
        iters,
        |e| {
            println!("{e}");
            std::io::stdout().flush().unwrap();
        },
        || {
            let mut line = String::new();
            stdin.lock().read_line(&mut line).unwrap();
            line.trim().parse().unwrap()
        },
    );
}

/// Busy-polling non-blocking reads, like the soft provider's poll loop.
fn read_exact_spin(s: &mut TcpStream, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => panic!("closed"),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
}

fn raw_tcp(iters: usize) -> Vec<Duration> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
        let mut buf = [0u8; SIZE];
        for _ in 0..WARMUP + iters {
            read_exact_spin(&mut s, &mut buf);
            s.write_all(&buf).unwrap();
        }
    });
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    c.set_nonblocking(true).unwrap();
    let mut buf = [0u8; SIZE];
    let mut v = Vec::with_capacity(iters);
    for i in 0..WARMUP + iters {
        let t = Instant::now();
        c.write_all(&buf).unwrap();
        read_exact_spin(&mut c, &mut buf);
        if i >= WARMUP {
            v.push(t.elapsed());
        }
    }
    server.join().unwrap();
    v
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(args[2].parse().unwrap());
        return;
    }
    let iters = args.get(1).map(|s| s.parse().unwrap()).unwrap_or(20_000);
    // An optional second argument runs only the measurements whose name contains it.
    let only = args.get(2).cloned().unwrap_or_default();
    type Run = (&'static str, fn(usize) -> Vec<Duration>);
    let runs: [Run; 7] = [
        ("raw TCP (threads)", raw_tcp),
        ("soft RC (threads)", soft_threads),
        ("soft RC (processes)", soft_processes),
        ("soft UD (threads)", ud_threads),
        ("tokio TCP (event)", tcp_async),
        ("soft RC (event)", soft_async),
        ("raw TCP (threads)", raw_tcp),
    ];
    let count_only = args.get(3).map(String::as_str) == Some("--count");
    for (name, f) in runs.into_iter().filter(|(n, _)| n.contains(only.as_str())) {
        let samples = f(iters);
        if count_only {
            println!("{name:<24} n={}", samples.len());
        } else {
            report(name, samples);
        }
    }
}
