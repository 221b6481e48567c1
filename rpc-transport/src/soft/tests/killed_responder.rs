//! A responder process killed while the soft provider places its answers to this
//! side's RDMA Reads straight into this side's memory (`process_vm_writev` on the
//! shared-memory link): its death must end this side's QP as a dead peer on TCP does.
//!
//! Soft-only: on a NIC the kernel answers Reads, not the process, so killing the
//! process does not stop them (rxe answered every Read queued before the kill, siw's
//! reset flushed them). The conformance suite's `two_process` tests cover NICs.
//!
//! The responder is this test binary again, running only [`source_child`].

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use crate::{
    AccessFlags, AsyncEvent, CompletionQueue, Device, MemoryRegion, QpEndpoint, QpInitAttr,
    QpState, QpType, QueuePair, RcRetry, RecvWr, RemoteMr, SendOp, SendWr, SoftConfig, WcStatus,
    WorkCompletion, SOFT_LINK_ENV,
};

/// Bytes of each RDMA Read.
const READ_LEN: usize = 16 << 20;
/// Reads in flight: enough that one is always outstanding at the kill.
const IN_FLIGHT: u64 = 2;
/// Set in the child's environment; its absence means "not started as the child".
const CHILD_ENV: &str = "RDMA_RPC_SOFT_KILLED_RESPONDER_CHILD";
const CHILD_TEST: &str = "soft::tests::killed_responder::source_child";
/// Marks the child's records among libtest's output.
const TAG: &str = "@@ ";
/// Each wait, child start-up included, on a machine busy compiling.
const DEADLINE: Duration = Duration::from_secs(60);
const PSN_A: u32 = 0x00_1234;
const PSN_B: u32 = 0x00_9abc;

/// Retry budget as the conformance suite's killed-peer tests use.
fn retry() -> RcRetry {
    RcRetry {
        ack_timeout: 14,
        retry_cnt: 6,
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 6) as u8).collect()
}

/// One soft device with an RC QP in RESET and its two CQs (fields drop in order:
/// the QP before its CQs, PD and device).
struct End {
    qp: QueuePair,
    scq: CompletionQueue,
    rcq: CompletionQueue,
    pd: crate::ProtectionDomain,
    dev: Device,
}

impl End {
    fn new() -> End {
        let dev = Device::open_soft(SoftConfig::default()).expect("soft device");
        let pd = dev.alloc_pd().expect("pd");
        let scq = dev.create_cq(64).expect("cq");
        let rcq = dev.create_cq(64).expect("cq");
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq))
            .expect("qp");
        End {
            qp,
            scq,
            rcq,
            pd,
            dev,
        }
    }

    fn mr(&self, len: usize) -> MemoryRegion {
        self.pd.alloc_mr(len, AccessFlags::all()).expect("mr")
    }
}

/// Polls `cq` until one completion, within [`DEADLINE`].
fn wait_wc(cq: &CompletionQueue, what: &str) -> WorkCompletion {
    let deadline = Instant::now() + DEADLINE;
    let mut wc = [WorkCompletion::default()];
    loop {
        if cq.poll(&mut wc).expect("poll") == 1 {
            return wc[0];
        }
        assert!(Instant::now() < deadline, "no completion for {what}");
        std::thread::yield_now();
    }
}

/// The child process, its records as a channel (read by a thread, so waits can have
/// a deadline) and its stdin.
struct Responder {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Responder {
    fn spawn() -> Responder {
        let mut child = Command::new(std::env::current_exe().expect("current_exe"))
            .args(["--exact", CHILD_TEST, "--ignored", "--nocapture"])
            .arg("--test-threads=1")
            .env(CHILD_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawning the responder");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Responder {
            child,
            stdin,
            lines,
        }
    }

    fn recv(&mut self, key: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no {key:?} from the responder: {e}"));
            if let Some(v) = record(&line, key) {
                return v;
            }
        }
    }

    fn send(&mut self, key: &str, value: &str) {
        writeln!(self.stdin, "{TAG}{key} {value}")
            .and_then(|()| self.stdin.flush())
            .expect("writing to the responder");
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of record `key` in `line` (libtest may print before it on the line).
fn record(line: &str, key: &str) -> Option<String> {
    let rest = &line[line.find(TAG)? + TAG.len()..];
    Some(rest.strip_prefix(key)?.strip_prefix(' ')?.to_string())
}

/// Whether Read responses are placed directly: shared-memory link, direct copies on.
fn expect_placed() -> bool {
    std::env::var(SOFT_LINK_ENV).map_or(true, |v| v != "tcp" && v != "rings")
}

/// The child, the responder, dies (SIGKILL) while this side's Reads of its region
/// stream in. Reads that completed before carry the child's bytes; of those
/// outstanding, the first that did not complete fails RETRY_EXC_ERR and the rest are
/// flushed (or all completed); the posted receive is flushed, the QP is in ERR and
/// QP_FATAL is raised: a dead peer's completions, as on TCP.
#[test]
fn responder_killed_while_placing_reads_ends_qp_in_err() {
    let a = End::new();
    let dst = a.mr(IN_FLIGHT as usize * READ_LEN);
    let buf = a.mr(64);
    let mut peer = Responder::spawn();
    let ep_b: QpEndpoint = peer.recv("ep").parse().expect("endpoint record");
    a.qp.accept_rc_with(&ep_b, PSN_A, AccessFlags::all(), retry())
        .expect("accept_rc");
    peer.send("ep", &a.qp.endpoint(PSN_A).expect("endpoint").to_string());
    let mr_b = mr_from_text(&peer.recv("mr"));
    let rsge = [buf.sge(0, 64)];
    // SAFETY: `buf` outlives the receive and is not read.
    unsafe {
        a.qp.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &rsge,
        }])
    }
    .expect("post_recv");
    let read = SendOp::RdmaRead {
        remote_addr: mr_b.addr,
        rkey: mr_b.rkey,
    };
    let sges: Vec<_> = (0..IN_FLIGHT as usize)
        .map(|k| [dst.sge(k * READ_LEN, READ_LEN as u32)])
        .collect();
    let post_read = |i: u64| {
        let wr = SendWr::new(i, read, &sges[(i % IN_FLIGHT) as usize]);
        // SAFETY: `dst` outlives every completion; each slot is read only after its
        // Read completed and before it is posted again.
        unsafe { a.qp.post_send(&[wr]) }.expect("post_send");
    };
    for i in 0..IN_FLIGHT {
        post_read(i);
    }
    let want = pattern(READ_LEN);
    let placed = || {
        a.dev
            .soft_stats()
            .expect("soft")
            .rc_read_bytes_placed_by_peer
    };
    // Until a Read was placed directly (or, without placement, the first Read); then
    // the child dies with Reads outstanding.
    let mut next = IN_FLIGHT;
    let deadline = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < deadline, "no Read placed directly");
        let wc = wait_wc(&a.scq, "a Read before the kill");
        assert_eq!((wc.wr_id, wc.status), (next - IN_FLIGHT, WcStatus::Success));
        let slot = (wc.wr_id % IN_FLIGHT) as usize * READ_LEN;
        assert!(
            dst.to_vec(slot, READ_LEN) == want,
            "Read {} differs",
            wc.wr_id
        );
        post_read(next);
        next += 1;
        if !expect_placed() || placed() > 0 {
            break;
        }
    }
    if !expect_placed() {
        assert_eq!(placed(), 0, "placed although ${SOFT_LINK_ENV} rules it out");
    }
    peer.child.kill().expect("killing the responder");
    peer.child.wait().expect("reaping the responder");
    let mut failed = false;
    for want in next - IN_FLIGHT..next {
        let wc = wait_wc(&a.scq, "the Reads outstanding at the kill");
        assert_eq!(wc.wr_id, want, "{wc:?}");
        let expected = match (failed, wc.status) {
            (false, WcStatus::Success) => true,
            (false, WcStatus::RetryExcErr) => {
                failed = true;
                true
            }
            (true, WcStatus::WrFlushErr) => true,
            _ => false,
        };
        assert!(expected, "after the responder died: {wc:?}");
    }
    let recv = wait_wc(&a.rcq, "the flushed receive");
    assert_eq!((recv.wr_id, recv.status), (1, WcStatus::WrFlushErr));
    assert_eq!(a.qp.state(), QpState::Err);
    let qpn = a.qp.qp_num();
    let deadline = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    loop {
        match a.dev.try_async_event() {
            Some(AsyncEvent::QpFatal(q)) if q == qpn => break,
            Some(ev) => seen.push(ev),
            None => assert!(Instant::now() < deadline, "no QP_FATAL; saw {seen:?}"),
        }
        std::thread::yield_now();
    }
}

fn mr_to_text(mr: &RemoteMr) -> String {
    format!("{:x}:{:x}:{:x}", mr.addr, mr.len, mr.rkey)
}

fn mr_from_text(s: &str) -> RemoteMr {
    let v: Vec<u64> = s
        .split(':')
        .map(|p| u64::from_str_radix(p, 16).unwrap_or_else(|_| panic!("bad MR record {s:?}")))
        .collect();
    let [addr, len, rkey] = v[..] else {
        panic!("bad MR record {s:?}");
    };
    RemoteMr {
        addr,
        len,
        rkey: rkey as u32,
    }
}

/// The responder: offers its region for Reads and polls (so that answers do not wait
/// for the provider's helper) until killed. Started by the test above; in an ordinary
/// `--include-ignored` run it says so and does nothing.
#[test]
#[ignore = "child side of responder_killed_while_placing_reads_ends_qp_in_err"]
fn source_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        println!("source_child: ${CHILD_ENV} unset, so not started as a child");
        return;
    }
    let b = End::new();
    let region = b.mr(READ_LEN);
    region.write(0, &pattern(READ_LEN));
    say("ep", &b.qp.endpoint(PSN_B).expect("endpoint").to_string());
    let ep_a: QpEndpoint = hear("ep").parse().expect("endpoint record");
    b.qp.connect_rc_with(&ep_a, PSN_B, AccessFlags::all(), retry())
        .expect("connect_rc");
    say("mr", &mr_to_text(&region.remote()));
    loop {
        let _ = b.scq.poll(&mut []);
        let _ = b.rcq.poll(&mut []);
        std::thread::yield_now();
    }
}

fn say(key: &str, value: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{TAG}{key} {value}")
        .and_then(|()| out.flush())
        .expect("writing to the parent");
}

fn hear(key: &str) -> String {
    for line in std::io::stdin().lock().lines() {
        if let Some(v) = record(&line.expect("reading from the parent"), key) {
            return v;
        }
    }
    panic!("the parent closed stdin before sending {key:?}");
}
