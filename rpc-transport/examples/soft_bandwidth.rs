//! Streaming bandwidth: 1 MiB RDMA Writes, then 1 MiB Sends, then 1 MiB Sends gathered
//! from two SGEs (a 64 B header and the rest, as a framed message is), 16 in flight,
//! between two soft devices in two threads, next to a raw TCP stream over loopback
//! measured in the same run.
//!
//! `cargo run --release -p rpc-transport --example soft_bandwidth [total_MiB]`

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use rpc_transport::{
    AccessFlags, Device, QpInitAttr, QpType, RecvWr, RemoteMr, SendOp, SendWr, SoftConfig,
    WorkCompletion,
};

const MSG: usize = 1 << 20;
const DEPTH: usize = 16;

/// Sends (into receives the target reposts as they complete) rather than Writes;
/// `Gathered`: Sends of a 64 B header SGE and the rest of the message.
#[derive(Clone, Copy)]
enum Op {
    Write,
    Send,
    Gathered,
}

/// The header SGE of a gathered Send.
const HEADER: usize = 64;

fn soft(total: usize, kind: Op) -> f64 {
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
        let post_recv = |slot: u64| {
            let sge = [mr.sge(slot as usize * MSG, MSG as u32)];
            let wr = RecvWr {
                wr_id: slot,
                sg_list: &sge,
            };
            // SAFETY: the MR outlives the QP's use of it; its bytes are never read.
            unsafe { qp.post_recv(&[wr]) }.unwrap();
        };
        if !matches!(kind, Op::Write) {
            (0..DEPTH as u64).for_each(post_recv);
        }
        // Writes bring no completions here: the target polls to drive progress, and
        // reposts the receive of each Send that arrived.
        let mut wc = [WorkCompletion::default(); 16];
        while !done2.load(Ordering::Relaxed) {
            let n = cq.poll(&mut wc).unwrap();
            for w in &wc[..n] {
                assert!(w.is_ok(), "{w:?}");
                post_recv(w.wr_id);
            }
        }
    });
    let (_dev, pd, cq, qp) = open();
    let mr = pd.alloc_mr(MSG, AccessFlags::LOCAL_WRITE).unwrap();
    ep_tx.send(qp.endpoint(0).unwrap()).unwrap();
    let (peer, remote): (_, RemoteMr) = back_rx.recv().unwrap();
    qp.connect_rc(&peer, 0, AccessFlags::all()).unwrap();
    let whole = [mr.sge(0, MSG as u32)];
    // The header last in the buffer, the body first: two ranges, not one.
    let gathered = [
        mr.sge(MSG - HEADER, HEADER as u32),
        mr.sge(0, (MSG - HEADER) as u32),
    ];
    let sge: &[_] = match kind {
        Op::Gathered => &gathered,
        _ => &whole,
    };
    let mut wc = [WorkCompletion::default(); 16];
    let (mut posted, mut completed) = (0usize, 0usize);
    let start = Instant::now();
    while completed < total {
        while posted < total && posted - completed < DEPTH {
            let op = match kind {
                Op::Write => SendOp::RdmaWrite {
                    remote_addr: remote.addr + ((posted % DEPTH) * MSG) as u64,
                    rkey: remote.rkey,
                },
                Op::Send | Op::Gathered => SendOp::Send,
            };
            // SAFETY: the MR outlives the transfer and is not written meanwhile.
            unsafe { qp.post_send(&[SendWr::new(posted as u64, op, sge)]) }.unwrap();
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
    println!(
        "soft RC 1 MiB Writes    {:6.2} GB/s",
        soft(total, Op::Write)
    );
    println!("soft RC 1 MiB Sends     {:6.2} GB/s", soft(total, Op::Send));
    println!(
        "soft RC 1 MiB Sends, 2 SGEs {:6.2} GB/s",
        soft(total, Op::Gathered)
    );
    println!("raw TCP stream          {:6.2} GB/s", raw_tcp(total));
}
