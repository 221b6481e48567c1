//! Streaming bandwidth: 1 MiB RDMA Writes (16 in flight) between two soft devices in
//! two threads, next to a raw TCP stream over loopback measured in the same run.
//!
//! `cargo run --release -p rpc-transport --example soft_bandwidth [total_MiB]`

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use rpc_transport::{
    AccessFlags, Device, QpInitAttr, QpType, RemoteMr, SendOp, SendWr, SoftConfig, WorkCompletion,
};

const MSG: usize = 1 << 20;
const DEPTH: usize = 16;

fn soft(total: usize) -> f64 {
    let open = || {
        let dev = Device::open_soft(SoftConfig::default()).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(256).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        (dev, pd, cq, qp)
    };
    let (ep_tx, ep_rx) = mpsc::channel();
    let (back_tx, back_rx) = mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));
    let done2 = done.clone();
    let server = std::thread::spawn(move || {
        let (_dev, pd, cq, qp) = open();
        let mr = pd.alloc_mr(MSG * DEPTH, AccessFlags::all()).unwrap();
        back_tx
            .send((qp.endpoint(0).unwrap(), mr.remote()))
            .unwrap();
        let peer = ep_rx.recv().unwrap();
        qp.connect_rc(&peer, 0, AccessFlags::all()).unwrap();
        // The target polls only to drive progress (no completions arrive for Writes).
        while !done2.load(Ordering::Relaxed) {
            let _ = cq.poll(&mut []);
        }
    });
    let (_dev, pd, cq, qp) = open();
    let mr = pd.alloc_mr(MSG, AccessFlags::LOCAL_WRITE).unwrap();
    ep_tx.send(qp.endpoint(0).unwrap()).unwrap();
    let (peer, remote): (_, RemoteMr) = back_rx.recv().unwrap();
    qp.connect_rc(&peer, 0, AccessFlags::all()).unwrap();
    let sge = [mr.sge(0, MSG as u32)];
    let mut wc = [WorkCompletion::default(); 16];
    let (mut posted, mut completed) = (0usize, 0usize);
    let start = Instant::now();
    while completed < total {
        while posted < total && posted - completed < DEPTH {
            let op = SendOp::RdmaWrite {
                remote_addr: remote.addr + ((posted % DEPTH) * MSG) as u64,
                rkey: remote.rkey,
            };
            // SAFETY: the MR outlives the transfer and is not written meanwhile.
            unsafe { qp.post_send(&[SendWr::new(posted as u64, op, &sge)]) }.unwrap();
            posted += 1;
        }
        let n = cq.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            assert!(w.is_ok(), "{w:?}");
        }
        completed += n;
    }
    let secs = start.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    server.join().unwrap();
    (total * MSG) as f64 / secs / 1e9
}

fn raw_tcp(total: usize) -> f64 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; MSG];
        let mut left = total * MSG;
        while left > 0 {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            left -= n;
        }
        s.write_all(b"k").unwrap();
    });
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    let buf = vec![1u8; MSG];
    let start = Instant::now();
    for _ in 0..total {
        c.write_all(&buf).unwrap();
    }
    c.read_exact(&mut [0u8; 1]).unwrap();
    let secs = start.elapsed().as_secs_f64();
    server.join().unwrap();
    (total * MSG) as f64 / secs / 1e9
}

fn main() {
    let total = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(2048);
    println!("raw TCP stream          {:6.2} GB/s", raw_tcp(total));
    println!("soft RC 1 MiB Writes    {:6.2} GB/s", soft(total));
    println!("raw TCP stream          {:6.2} GB/s", raw_tcp(total));
}
