//! Small-message latency beside 64 MiB transfers, on the soft provider: 64-byte RC
//! ping-pongs between two soft devices (two threads, both busy-polling), alone, then
//! while 64 MiB RDMA Reads run back to back on the same QP, then on another QP
//! between the same devices. Prints p50/p99 of each and their ratio to the quiet
//! run, all measured in the same run.
//!
//! `cargo run --release -p rpc-transport --example soft_mixed [pings]`

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_transport::{
    AccessFlags, Device, MemoryRegion, QpInitAttr, QpType, QueuePair, RecvWr, SendOp, SendWr,
    SoftConfig, WcOpcode, WorkCompletion,
};

const PING: usize = 64;
const BULK: usize = 64 << 20;
const RECVS: u64 = 16;
const ALL: AccessFlags = AccessFlags::all();

fn post_recv(qp: &QueuePair, mr: &MemoryRegion, slot: u64) {
    let sge = [mr.sge(slot as usize * PING, PING as u32)];
    // SAFETY: the MR outlives the QP's use of it; a slot is reposted only once consumed.
    unsafe {
        qp.post_recv(&[RecvWr {
            wr_id: slot,
            sg_list: &sge,
        }])
    }
    .unwrap();
}

fn post(qp: &QueuePair, wr: SendWr<'_>) {
    // SAFETY: the MRs outlive the transfers; nothing else writes them meanwhile.
    unsafe { qp.post_send(&[wr]) }.unwrap();
}

/// Where bulk Reads run during a phase (set by the pinging thread, read by the other).
const QUIET: u8 = 0;
const SAME_QP: u8 = 1;
const OTHER_QP: u8 = 2;

fn main() {
    let pings: usize = std::env::args().nth(1).map_or(3000, |s| s.parse().unwrap());
    let open = || Device::open_soft(SoftConfig::default()).unwrap();
    let (dev_a, dev_b) = (open(), open());
    let (pd_a, pd_b) = (dev_a.alloc_pd().unwrap(), dev_b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (dev_a.create_cq(256).unwrap(), dev_b.create_cq(256).unwrap());
    let pair = || {
        let a = pd_a
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq_a, &cq_a))
            .unwrap();
        let b = pd_b
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq_b, &cq_b))
            .unwrap();
        let (ea, eb) = (a.endpoint(0).unwrap(), b.endpoint(0).unwrap());
        a.connect_rc(&eb, 0, ALL).unwrap();
        b.connect_rc(&ea, 0, ALL).unwrap();
        (a, b)
    };
    // Pings go A to B on `ping`, echoes come back on `echo` (a send queue holding a
    // 64 MiB Read would hold every later completion behind it, as on hardware). B
    // reads 64 MiB from A on `ping` (A's Read responses share the connection with
    // its pings) or on `other`.
    let (ping_a, ping_b) = pair();
    let (echo_a, echo_b) = pair();
    let (_other_a, other_b) = pair();
    let small_a = pd_a.alloc_mr(PING * RECVS as usize, ALL).unwrap();
    let small_b = pd_b.alloc_mr(PING * RECVS as usize, ALL).unwrap();
    let big_a = pd_a.alloc_mr(BULK, ALL).unwrap();
    let big_b = pd_b.alloc_mr(BULK, ALL).unwrap();
    let remote = big_a.remote();
    for slot in 0..RECVS {
        post_recv(&echo_a, &small_a, slot);
        post_recv(&ping_b, &small_b, slot);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mode = Arc::new(AtomicU8::new(QUIET));
    let reads = Arc::new(AtomicUsize::new(0));
    // B: echoes every ping and keeps one 64 MiB Read in flight while asked to.
    let echo = {
        let (stop, mode, reads) = (stop.clone(), mode.clone(), reads.clone());
        std::thread::spawn(move || {
            let mut wc = [WorkCompletion::default(); 16];
            let mut reading = false;
            while !stop.load(Ordering::Relaxed) {
                let m = mode.load(Ordering::Acquire);
                if !reading && m != QUIET {
                    let qp = if m == SAME_QP { &ping_b } else { &other_b };
                    let op = SendOp::RdmaRead {
                        remote_addr: remote.addr,
                        rkey: remote.rkey,
                    };
                    post(qp, SendWr::new(7, op, &[big_b.sge(0, BULK as u32)]));
                    reading = true;
                }
                let n = cq_b.poll(&mut wc).unwrap();
                for w in &wc[..n] {
                    assert!(w.is_ok(), "{w:?}");
                    match w.opcode {
                        WcOpcode::Recv => {
                            let sge = [small_b.sge(w.wr_id as usize * PING, PING as u32)];
                            post(&echo_b, SendWr::new(1, SendOp::Send, &sge));
                            post_recv(&ping_b, &small_b, w.wr_id);
                        }
                        WcOpcode::RdmaRead => {
                            reading = false;
                            reads.fetch_add(1, Ordering::Release);
                        }
                        _ => {}
                    }
                }
            }
        })
    };
    let mut wc = [WorkCompletion::default(); 16];
    let mut phase = |m: u8| -> Vec<Duration> {
        let before = reads.load(Ordering::Acquire);
        mode.store(m, Ordering::Release);
        let mut rtts = Vec::with_capacity(pings);
        for i in 0..pings + 200 {
            let sge = [small_a.sge(0, PING as u32)];
            let t = Instant::now();
            post(&ping_a, SendWr::new(1, SendOp::Send, &sge));
            'echo: loop {
                let n = cq_a.poll(&mut wc).unwrap();
                for w in &wc[..n] {
                    assert!(w.is_ok(), "{w:?}");
                    if w.opcode == WcOpcode::Recv {
                        post_recv(&echo_a, &small_a, w.wr_id);
                        if i >= 200 {
                            rtts.push(t.elapsed());
                        }
                        break 'echo;
                    }
                }
            }
        }
        mode.store(QUIET, Ordering::Release);
        if m != QUIET {
            // Wait for the Read under way, so that the next phase starts quiet.
            let target = reads.load(Ordering::Acquire) + 1;
            while reads.load(Ordering::Acquire) < target {
                let _ = cq_a.poll(&mut wc).unwrap();
            }
            println!(
                "  ({} x 64 MiB Reads completed during the phase)",
                reads.load(Ordering::Acquire) - before
            );
        }
        rtts
    };
    let pct = |v: &mut Vec<Duration>, q: f64| {
        v.sort();
        v[((v.len() as f64 * q) as usize).min(v.len() - 1)].as_secs_f64() * 1e6
    };
    let mut quiet = phase(QUIET);
    let mut same = phase(SAME_QP);
    let mut other = phase(OTHER_QP);
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    let (q50, q99) = (pct(&mut quiet, 0.5), pct(&mut quiet, 0.99));
    println!("64 B ping-pong, {pings} round trips per phase:");
    println!("quiet                     p50 {q50:8.1} us  p99 {q99:8.1} us");
    for (name, v) in [
        ("64 MiB Reads, same QP", &mut same),
        ("64 MiB Reads, other QP", &mut other),
    ] {
        let (p50, p99) = (pct(v, 0.5), pct(v, 0.99));
        println!(
            "{name:<25} p50 {p50:8.1} us  p99 {p99:8.1} us   ({:.1}x, {:.1}x quiet)",
            p50 / q50,
            p99 / q99
        );
    }
}
