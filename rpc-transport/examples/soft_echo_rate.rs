//! Raw verbs echo rate at a depth: 32-byte RC Sends, `depth` in flight, each answered
//! by a Send of the same bytes, between two soft devices in two threads that
//! busy-poll; on the shared-memory link and with the link forced to TCP, alternating
//! in the same run. No RPC: what the soft provider's link carries when nothing above
//! it costs anything, to set beside `rpc-bench`'s rdma-rpc and rdma-rpc-tcp cells at
//! the same depth (whose ratio counts everything rdma-rpc does per call too).
//!
//! `cargo run --release -p rpc-transport --example soft_echo_rate [depth] [round trips] [rounds] [shm|tcp]`
//! (defaults 256, 400000, 3, both links; one link alone for a profile).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use rpc_transport::{
    AccessFlags, CompletionQueue, Device, MemoryRegion, QpEndpoint, QpInitAttr, QpType, QueuePair,
    RecvWr, SendFlags, SendOp, SendWr, Sge, SoftConfig, SoftLink, WcOpcode, WorkCompletion,
};

const SIZE: usize = 32;
/// Round trips before the clock starts.
const WARMUP: usize = 20_000;

/// One side's device, queue pair and buffers (a receive slot per message in flight,
/// and the client's one send slot: sends are inline, copied when posted).
struct Side {
    _dev: Device,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

impl Side {
    fn open(link: SoftLink, depth: usize) -> Side {
        let dev = Device::open_soft(SoftConfig {
            link,
            ..SoftConfig::default()
        })
        .unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(4 * depth as u32 + 64).unwrap();
        let mut attr = QpInitAttr::new(QpType::Rc, &cq, &cq);
        attr.cap.max_send_wr = 2 * depth as u32 + 32;
        attr.cap.max_recv_wr = depth as u32;
        let qp = pd.create_qp(&attr).unwrap();
        let mr = pd
            .alloc_mr((depth + 1) * SIZE, AccessFlags::LOCAL_WRITE)
            .unwrap();
        Side {
            _dev: dev,
            cq,
            qp,
            mr,
        }
    }

    /// Opens a side, trades endpoints with the other thread, connects and posts a
    /// receive per message in flight.
    fn connected(
        link: SoftLink,
        depth: usize,
        to_peer: &mpsc::Sender<QpEndpoint>,
        from_peer: &mpsc::Receiver<QpEndpoint>,
    ) -> Side {
        let s = Side::open(link, depth);
        to_peer.send(s.qp.endpoint(0).unwrap()).unwrap();
        s.qp.connect_rc(&from_peer.recv().unwrap(), 0, AccessFlags::empty())
            .unwrap();
        for slot in 0..depth as u64 {
            s.post_recv(slot);
        }
        s
    }

    fn post_recv(&self, slot: u64) {
        let sge = [self.mr.sge(SIZE * (1 + slot as usize), SIZE as u32)];
        // SAFETY: the MR outlives the QP's use of it (both dropped together, after
        // the last completion this side waits for), and a slot is reposted only
        // once its receive completed.
        unsafe {
            self.qp.post_recv(&[RecvWr {
                wr_id: slot,
                sg_list: &sge,
            }])
        }
        .unwrap();
    }

    /// Inline Sends of `SIZE` bytes, one per `(slot, n)` (slot 0: the send slot),
    /// posted as one list as a verbs program answering a batch would (one write on
    /// the TCP link); each 32nd is signaled so that the send queue drains.
    fn send(&self, batch: &[(u64, u64)]) {
        let sges: Vec<[Sge; 1]> = batch
            .iter()
            .map(|&(slot, _)| [self.mr.sge(SIZE * slot as usize, SIZE as u32)])
            .collect();
        let wrs: Vec<SendWr<'_>> = batch
            .iter()
            .zip(&sges)
            .map(|(&(_, n), sge)| {
                let mut flags = SendFlags::INLINE;
                if n % 32 == 31 {
                    flags |= SendFlags::SIGNALED;
                }
                SendWr::new(n, SendOp::Send, sge).flags(flags)
            })
            .collect();
        // SAFETY: inline payloads, copied during the call.
        unsafe { self.qp.post_send(&wrs) }.unwrap();
    }

    /// Busy-polls until receives complete; returns their slots into `got`.
    fn wait_recvs(&self, wc: &mut [WorkCompletion], got: &mut Vec<u64>) {
        got.clear();
        while got.is_empty() {
            let n = self.cq.poll(wc).unwrap();
            for w in &wc[..n] {
                assert!(w.is_ok(), "{w:?}");
                if w.opcode == WcOpcode::Recv {
                    assert_eq!(w.byte_len as usize, SIZE);
                    got.push(w.wr_id);
                }
            }
        }
    }

    /// Polls a little longer so that the last acknowledgements leave.
    fn linger(&self, wc: &mut [WorkCompletion]) {
        let until = Instant::now() + Duration::from_millis(20);
        while Instant::now() < until {
            let _ = self.cq.poll(wc);
        }
    }
}

/// Round trips per second on `link`, `depth` in flight.
fn rate(link: SoftLink, depth: usize, total: usize) -> f64 {
    let (to_client, from_server) = mpsc::channel::<QpEndpoint>();
    let (to_server, from_client) = mpsc::channel::<QpEndpoint>();
    let all = (WARMUP + total) as u64;
    let server = std::thread::spawn(move || {
        let s = Side::connected(link, depth, &to_client, &from_client);
        let mut wc = [WorkCompletion::default(); 64];
        let (mut got, mut batch, mut answered) = (Vec::new(), Vec::new(), 0u64);
        while answered < all {
            s.wait_recvs(&mut wc, &mut got);
            batch.clear();
            for &slot in &got {
                batch.push((slot + 1, answered));
                answered += 1;
            }
            // Echoed from the receive slots (inline: copied now), then reposted.
            s.send(&batch);
            for &slot in &got {
                s.post_recv(slot);
            }
        }
        s.linger(&mut wc);
    });
    let c = Side::connected(link, depth, &to_server, &from_server);
    let mut wc = [WorkCompletion::default(); 64];
    let (mut got, mut batch) = (Vec::new(), Vec::new());
    let first: Vec<(u64, u64)> = (0..(depth as u64).min(all)).map(|n| (0, n)).collect();
    c.send(&first);
    let mut sent = first.len() as u64;
    let (mut done, mut started) = (0u64, None);
    while done < all {
        c.wait_recvs(&mut wc, &mut got);
        batch.clear();
        for &slot in &got {
            c.post_recv(slot);
            done += 1;
            if done == WARMUP as u64 {
                started = Some(Instant::now());
            }
            if sent < all {
                batch.push((0, sent));
                sent += 1;
            }
        }
        if !batch.is_empty() {
            c.send(&batch);
        }
    }
    let secs = started.expect("past the warm-up").elapsed().as_secs_f64();
    c.linger(&mut wc);
    server.join().unwrap();
    total as f64 / secs
}

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .map_or(default, |s| s.parse().expect("a number"))
    };
    let (depth, total, rounds) = (arg(1, 256), arg(2, 400_000), arg(3, 3));
    let only = std::env::args().nth(4);
    let run = |name: &str, link| {
        (only.is_none() || only.as_deref() == Some(name)).then(|| rate(link, depth, total))
    };
    println!("raw soft RC echo, {SIZE} B, {depth} in flight, {total} round trips per run");
    for round in 1..=rounds {
        let (shm, tcp) = (run("shm", SoftLink::Auto), run("tcp", SoftLink::Tcp));
        let show = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.0}"));
        let ratio = shm
            .zip(tcp)
            .map_or("-".to_string(), |(s, t)| format!("{:.2}", s / t));
        println!(
            "round {round}: shared memory {:>9} /s   TCP {:>9} /s   ratio {ratio}",
            show(shm),
            show(tcp)
        );
    }
}
