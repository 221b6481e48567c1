//! Provider throughput of large transfers: 4 MiB RDMA Reads, then 4 MiB Sends, one at a
//! time, between two soft devices on 127.0.0.1 in two threads; next to a raw TCP
//! loopback copy of the same size in the same process, as a ratio.
//!
//! `cargo run --release -p rpc-transport --example soft_copy [count] [depth] [rounds]`
//!
//! `count` transfers per kind (default 128), `depth` in flight at once (default 1),
//! `rounds` repetitions of the whole set (default 3). The machine may be shared, so
//! each figure is the best of the rounds, and each round's ratio is printed too.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use rpc_transport::{
    AccessFlags, Device, QpInitAttr, QpType, RecvWr, RemoteMr, SendOp, SendWr, SoftConfig,
    WcOpcode, WorkCompletion,
};

const MSG: usize = 4 << 20;

struct Figures {
    read: f64,
    send: f64,
}

fn soft(count: usize, depth: usize) -> Figures {
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
        let mr = pd.alloc_mr(MSG * depth, AccessFlags::all()).unwrap();
        let pattern: Vec<u8> = (0..MSG).map(|i| (i % 251) as u8).collect();
        mr.write(0, &pattern);
        back_tx
            .send((qp.endpoint(0).unwrap(), mr.remote()))
            .unwrap();
        let peer = ep_rx.recv().unwrap();
        qp.connect_rc(&peer, 0, AccessFlags::all()).unwrap();
        let post_recv = |slot: usize| {
            let sge = [mr.sge(slot * MSG, MSG as u32)];
            // SAFETY: the MR outlives the QP's use of it; nothing reads it meanwhile.
            unsafe {
                qp.post_recv(&[RecvWr {
                    wr_id: slot as u64,
                    sg_list: &sge,
                }])
            }
            .unwrap();
        };
        for slot in 0..depth {
            post_recv(slot);
        }
        let mut wc = [WorkCompletion::default(); 16];
        // Serves Reads (no completions here) and reposts each receive that completes.
        while !done2.load(Ordering::Relaxed) {
            let n = cq.poll(&mut wc).unwrap();
            for w in &wc[..n] {
                assert!(w.is_ok() && w.opcode == WcOpcode::Recv, "{w:?}");
                post_recv(w.wr_id as usize);
            }
        }
    });
    let (_dev, pd, cq, qp) = open();
    let mr = pd.alloc_mr(MSG * depth, AccessFlags::all()).unwrap();
    ep_tx.send(qp.endpoint(0).unwrap()).unwrap();
    let (peer, remote): (_, RemoteMr) = back_rx.recv().unwrap();
    qp.connect_rc(&peer, 0, AccessFlags::all()).unwrap();
    let run = |read: bool| {
        let mut wc = [WorkCompletion::default(); 16];
        let (mut posted, mut completed) = (0usize, 0usize);
        let start = Instant::now();
        while completed < count {
            while posted < count && posted - completed < depth {
                let slot = posted % depth;
                let sge = [mr.sge(slot * MSG, MSG as u32)];
                let op = if read {
                    SendOp::RdmaRead {
                        remote_addr: remote.addr,
                        rkey: remote.rkey,
                    }
                } else {
                    SendOp::Send
                };
                // SAFETY: the MR outlives the transfer; nothing touches it meanwhile.
                unsafe { qp.post_send(&[SendWr::new(posted as u64, op, &sge)]) }.unwrap();
                posted += 1;
            }
            let n = cq.poll(&mut wc).unwrap();
            for w in &wc[..n] {
                assert!(w.is_ok(), "{w:?}");
            }
            completed += n;
        }
        (count * MSG) as f64 / start.elapsed().as_secs_f64() / 1e9
    };
    let read = run(true);
    // What the Reads brought is the server's pattern, byte for byte.
    let expect: Vec<u8> = (0..MSG).map(|i| (i % 251) as u8).collect();
    assert!(mr.to_vec(0, MSG) == expect, "Read data differs");
    let send = run(false);
    done.store(true, Ordering::Relaxed);
    server.join().unwrap();
    Figures { read, send }
}

fn raw_tcp(count: usize) -> f64 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; MSG];
        for _ in 0..count {
            s.read_exact(&mut buf).unwrap();
        }
        s.write_all(b"k").unwrap();
    });
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    let buf = vec![1u8; MSG];
    let start = Instant::now();
    for _ in 0..count {
        c.write_all(&buf).unwrap();
    }
    c.read_exact(&mut [0u8; 1]).unwrap();
    let secs = start.elapsed().as_secs_f64();
    server.join().unwrap();
    (count * MSG) as f64 / secs / 1e9
}

fn main() {
    let mut args = std::env::args().skip(1);
    let count = args.next().map_or(128, |s| s.parse().unwrap());
    let depth = args.next().map_or(1, |s| s.parse().unwrap());
    let rounds = args.next().map_or(3, |s| s.parse().unwrap());
    let (mut tcp, mut read, mut send) = (0f64, 0f64, 0f64);
    for round in 1..=rounds {
        let t = raw_tcp(count);
        let f = soft(count, depth);
        println!(
            "round {round}: raw TCP {t:.2} GB/s, Read {:.2} GB/s ({:.2}x), Send {:.2} GB/s ({:.2}x)",
            f.read,
            f.read / t,
            f.send,
            f.send / t
        );
        (tcp, read, send) = (tcp.max(t), read.max(f.read), send.max(f.send));
    }
    println!("best of {rounds} rounds of {count} x 4 MiB, {depth} in flight:");
    println!("raw TCP 4 MiB copy       {tcp:6.2} GB/s");
    println!(
        "soft 4 MiB RDMA Read     {read:6.2} GB/s  {:.2}x raw TCP",
        read / tcp
    );
    println!(
        "soft 4 MiB Send          {send:6.2} GB/s  {:.2}x raw TCP",
        send / tcp
    );
}
