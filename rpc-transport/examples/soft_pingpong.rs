//! 64-byte RC ping-pong over two soft devices, next to a raw TCP ping-pong over
//! loopback measured in the same run. Both sides busy-poll.
//!
//! `cargo run --release -p rpc-transport --example soft_pingpong [iters]`
//! runs: raw TCP (two threads), soft (two threads), soft (two processes).
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
    AccessFlags, Device, QpEndpoint, QpInitAttr, QpType, RecvWr, SendFlags, SendOp, SendWr,
    SoftConfig, WorkCompletion,
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

fn soft_threads(iters: usize) -> Vec<Duration> {
    let (tx_a, rx_b) = mpsc::channel();
    let (tx_b, rx_a) = mpsc::channel();
    let server = std::thread::spawn(move || {
        soft_side(
            false,
            iters,
            move |e| tx_b.send(e).unwrap(),
            move || rx_b.recv().unwrap(),
        )
    });
    let s = soft_side(
        true,
        iters,
        move |e| tx_a.send(e).unwrap(),
        move || rx_a.recv().unwrap(),
    );
    server.join().unwrap();
    s
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
    report("raw TCP (threads)", raw_tcp(iters));
    report("soft RC (threads)", soft_threads(iters));
    report("soft RC (processes)", soft_processes(iters));
    report("raw TCP (threads)", raw_tcp(iters));
}
