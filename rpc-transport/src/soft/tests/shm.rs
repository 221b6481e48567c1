//! The shared-memory link under faults: a peer that writes garbage into the ring or
//! lies about its indices, and many QPs opened and closed.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};

use super::*;
use crate::soft::shm::{ident, Listener, Producer};
use crate::soft::wire::{self, Body};
use crate::{AsyncEvent, Gid, GlobalRoute, SendOp, WcStatus};

/// `a` (an RC QP in RTR) gets a peer played by the test: a TCP connection whose
/// `HELLO` names a listener of the test's, the handshake answered, and `SHM_SWITCH`
/// sent. Returns the ring `a` now reads (and the socket, which must stay open).
fn fake_shm_peer(a: &Side) -> (Producer, TcpStream) {
    fake_shm_peer_with(a, false)
}

/// [`fake_shm_peer`]; with `direct`, the fake peer offers this process's probe word,
/// so `a` may copy into and out of it (the peer's pid is this process's own).
fn fake_shm_peer_with(a: &Side, direct: bool) -> (Producer, TcpStream) {
    // A made-up peer that sorts above `a` (larger GID), so `a` waits for it to connect.
    let fake = Gid::soft(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 65535));
    let ah = AhAttr {
        grh: Some(GlobalRoute {
            dgid: fake,
            ..GlobalRoute::default()
        }),
        port_num: 1,
        ..AhAttr::default()
    };
    a.qp.modify(QpState::Init, &QpAttr::rc_init(ALL)).unwrap();
    a.qp.modify(QpState::Rtr, &QpAttr::rc_rtr(ah, 5, 0, Mtu::Mtu4096))
        .unwrap();
    let listener = Listener::open().unwrap();
    let addr = a.dev.gid(1, 0).unwrap().soft_addr().unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    let mut hello = Vec::new();
    let body = Body::Hello {
        gid: fake.0,
        src_qpn: 5,
        dst_qpn: a.qp.qp_num(),
        host: ident::host_identity(),
        listener: listener.id,
    };
    wire::encode(&mut hello, 0, 0, 0, &body, 0);
    s.write_all(&hello).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let req = loop {
        let _ = a.cq.poll(&mut []);
        if let Some(r) = listener.accept().unwrap() {
            break r.unwrap();
        }
        assert!(Instant::now() < deadline, "the QP never offered its ring");
    };
    assert_eq!((req.dst_qpn, req.src_qpn), (5, a.qp.qp_num()));
    let (to_a, _our_inbox, _) = req.answer(direct).unwrap();
    let mut switch = Vec::new();
    wire::encode(&mut switch, 0, 0, 0, &Body::ShmSwitch, 0);
    s.write_all(&switch).unwrap();
    (to_a, s)
}

fn wait_err(a: &Side) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.qp.state() != QpState::Err {
        let _ = a.cq.poll(&mut []);
        assert!(Instant::now() < deadline, "QP never saw the bad ring");
    }
    assert_eq!(
        a.dev.try_async_event(),
        Some(AsyncEvent::QpFatal(a.qp.qp_num()))
    );
}

/// Bytes in the ring that are not a frame move the QP to ERR (counted as malformed).
#[test]
fn malformed_ring_frame_moves_qp_to_err() {
    let a = side(QpType::Rc);
    let (mut to_a, _s) = fake_shm_peer(&a);
    let mut bad = [0u8; wire::HDR_LEN];
    bad[0] = wire::VERSION;
    bad[1] = 0xee; // no such opcode
    assert_eq!(to_a.write(&[&bad]).unwrap(), bad.len());
    wait_err(&a);
    assert_eq!(a.dev.soft_stats().unwrap().rc_frames_malformed, 1);
}

/// A peer sealing a record beyond the ring's capacity breaks the connection
/// instead of making the reader copy from outside what was written.
#[test]
fn lying_ring_seal_moves_qp_to_err() {
    let a = side(QpType::Rc);
    let (mut to_a, _s) = fake_shm_peer(&a);
    to_a.poke_seal(u64::MAX / 2);
    wait_err(&a);
}

/// A lent Send naming memory the peer does not have (here an unmapped page) is a
/// broken peer: the QP moves to ERR, counted as malformed, and the receive it would
/// have filled is untouched.
#[test]
fn a_loan_of_memory_the_peer_does_not_have_moves_qp_to_err() {
    let a = side(QpType::Rc);
    let (mut to_a, _s) = fake_shm_peer_with(&a, true);
    a.mr.write(0, &[0xee; 4096]);
    post_recv(&a, 1, 0, 4096);
    let lent = wire::Lent {
        src: 4096,
        len: 2048,
    };
    let mut frame = Vec::new();
    let flags = wire::FIRST | wire::LAST;
    wire::encode(&mut frame, flags, 0, 0, &Body::SendLent { imm: 0, lent }, 0);
    to_a.write(&[&frame]).unwrap();
    wait_err(&a);
    assert_eq!(a.dev.soft_stats().unwrap().rc_frames_malformed, 1);
    assert!(a.mr.to_vec(0, 4096).iter().all(|&b| b == 0xee));
}

/// A second `SHM_SWITCH` (from the ring) is a protocol error, not a panic.
#[test]
fn switch_frame_inside_the_ring_moves_qp_to_err() {
    let a = side(QpType::Rc);
    let (mut to_a, _s) = fake_shm_peer(&a);
    let mut switch = Vec::new();
    wire::encode(&mut switch, 0, 0, 0, &Body::ShmSwitch, 0);
    to_a.write(&[&switch]).unwrap();
    wait_err(&a);
}

const LEAK_CHILD_ENV: &str = "RDMA_RPC_SOFT_SHM_LEAK_CHILD";
const LEAK_TEST: &str = "soft::tests::shm::thousand_shm_qps_leak_no_fd_or_mapping";

/// Open descriptors, and those of them that are memfds.
fn fds() -> (usize, usize) {
    let mut all = 0;
    let mut memfds = 0;
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        all += 1;
        if std::fs::read_link(e.path()).is_ok_and(|p| p.to_string_lossy().contains("memfd:")) {
            memfds += 1;
        }
    }
    (all, memfds)
}

/// Mappings of this process, and those of them that are rings.
fn maps() -> (usize, usize) {
    let m = std::fs::read_to_string("/proc/self/maps").unwrap();
    let rings = m
        .lines()
        .filter(|l| l.contains("rdma-rpc-soft-ring"))
        .count();
    (m.lines().count(), rings)
}

/// 1,000 QP pairs connected over shared memory and dropped leave no descriptor, memfd
/// or ring mapping behind. Runs in a child process of its own (this binary again,
/// only this test), so that other tests' descriptors do not blur the count.
#[test]
fn thousand_shm_qps_leak_no_fd_or_mapping() {
    if std::env::var(LEAK_CHILD_ENV).is_err() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([LEAK_TEST, "--exact", "--test-threads=1", "--nocapture"])
            .env(LEAK_CHILD_ENV, "1")
            .env_remove(crate::SOFT_LINK_ENV)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "child failed: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let (a, b) = (side(QpType::Rc), side(QpType::Rc));
    let one_pair = |i: u64| {
        let qa =
            a.pd.create_qp(&QpInitAttr::new(QpType::Rc, &a.cq, &a.cq))
                .unwrap();
        let qb =
            b.pd.create_qp(&QpInitAttr::new(QpType::Rc, &b.cq, &b.cq))
                .unwrap();
        for (q, peer) in [(&qa, &qb), (&qb, &qa)] {
            let e = peer.endpoint(0).unwrap();
            q.connect_rc(&e, 0, ALL).unwrap();
        }
        // Traffic both ways until both outputs are on shared memory.
        let links = |s: &Side| s.dev.soft_stats().unwrap().rc_shm_links;
        let sge = [b.mr.sge(0, 8)];
        // SAFETY: the MR outlives the QPs.
        unsafe {
            qb.post_recv(&[RecvWr {
                wr_id: i,
                sg_list: &sge,
            }])
        }
        .unwrap();
        let asge = [a.mr.sge(0, 8)];
        // SAFETY: as above.
        unsafe { qa.post_send(&[SendWr::new(i, SendOp::Send, &asge)]) }.unwrap();
        assert!(wait(&b.cq, &[&a.cq]).is_ok());
        assert!(wait(&a.cq, &[&b.cq]).is_ok());
        let deadline = Instant::now() + Duration::from_secs(10);
        while links(&a) < i + 1 || links(&b) < i + 1 {
            let _ = a.cq.poll(&mut []);
            let _ = b.cq.poll(&mut []);
            assert!(
                Instant::now() < deadline,
                "pair {i} never moved to shared memory"
            );
        }
        assert_eq!(maps().1, 4, "each side maps its inbox and its peer's");
    };
    // Warm-up: lazily created state (the identity, CQ epoll members) exists after this.
    for i in 0..10 {
        one_pair(i);
    }
    let before = (fds(), maps());
    for i in 10..1010 {
        one_pair(i);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // CQs forget dead QPs at their sweep; polling lets it run.
        let _ = a.cq.poll(&mut []);
        let _ = b.cq.poll(&mut []);
        let now = (fds(), maps());
        if now.0 .0 <= before.0 .0 && now.0 .1 == 0 && now.1 .1 == 0 && now.1 .0 <= before.1 .0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 1,000 QP pairs: (fds, memfds) {:?} -> {:?}, (maps, rings) {:?} -> {:?}",
            before.0,
            now.0,
            before.1,
            now.1
        );
        std::thread::yield_now();
    }
}

/// `a` and `b` connected (1 s retry budget) with both directions on rings: Sends
/// each way until both have switched (a side's output moves to its ring with the
/// first bytes it writes after the handshake, so traffic must follow it).
pub(super) fn ring_pair() -> (Side, Side) {
    let (a, b) = rc_pair();
    until_on_rings(&a, &b);
    (a, b)
}

/// Sends each way between the connected `a` and `b` until both outputs write rings.
pub(super) fn until_on_rings(a: &Side, b: &Side) {
    let on_rings = |s: &Side| {
        let g = soft(s).lock();
        let link = g.rc.as_ref().and_then(|rc| rc.link.as_ref());
        link.is_some_and(|l| l.on_rings())
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(on_rings(a) && on_rings(b)) {
        for (s, peer) in [(a, b), (b, a)] {
            post_recv(peer, 90, 2048, 64);
            post(s, SendWr::new(91, SendOp::Send, &[s.mr.sge(1024, 8)]));
            assert!(wait(&peer.cq, &[&s.cq]).is_ok());
            assert!(wait(&s.cq, &[&peer.cq]).is_ok());
        }
        assert!(
            Instant::now() < deadline,
            "the QPs never moved to shared memory (is {}=tcp set?)",
            crate::SOFT_LINK_ENV
        );
    }
}

pub(super) fn soft(s: &Side) -> &crate::soft::Qp {
    match &s.qp.imp {
        crate::qp::QpImp::Soft(q) => q,
        #[allow(unreachable_patterns)]
        _ => panic!("not a soft QP"),
    }
}

pub(super) fn with_link<T>(s: &Side, f: impl FnOnce(&crate::soft::rc::Link) -> T) -> T {
    let g = soft(s).lock();
    f(g.rc
        .as_ref()
        .and_then(|rc| rc.link.as_ref())
        .expect("connected"))
}

/// Leaves `s` as a poller does that read the bytes its helper's doorbell request was
/// rung for and then went away without arming its CQ: the helper watches the bell,
/// nobody asks the peer to ring it. Made deterministic by letting the helper take one
/// ring first (whatever it was doing with earlier ones is then done): it reads, drains
/// and asks again; the request is then withdrawn. `s`'s CQ must not be polled.
fn leave_poller_without_arming(s: &Side) {
    with_link(s, |l| {
        let inbox = l.inbox().expect("on rings");
        inbox.withdraw_sleep();
        inbox.ring_own_bell();
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while with_link(s, |l| l.inbox().unwrap().flags()) != (true, false) {
        assert!(Instant::now() < deadline, "the helper never took the ring");
        std::thread::yield_now();
    }
    with_link(s, |l| l.inbox().unwrap().withdraw_sleep());
}

/// A Send to a QP whose poller went away without arming, after it had spent the
/// ring's doorbell request, still arrives and is acknowledged: the sender, seeing
/// its bytes sit unread, rings the receiver's bell, and the receiver's helper takes
/// over (as it would for a socket). Before, nothing woke the helper and the Send
/// failed RETRY_EXC_ERR when the sender's retry budget (1 s) ran out.
#[test]
fn send_reaches_a_receiver_whose_poller_left_without_arming() {
    let (a, b) = ring_pair();
    post_recv(&b, 7, 0, 64);
    leave_poller_without_arming(&b);
    a.mr.write(0, b"not lost");
    post(&a, SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)]));
    // Only the sender polls.
    let w = wait(&a.cq, &[]);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::Success));
    let r = wait(&b.cq, &[]);
    assert_eq!((r.wr_id, r.status, r.byte_len), (7, WcStatus::Success, 8));
    assert_eq!(b.mr.to_vec(0, 8), b"not lost");
}

/// A Read whose requester nobody polls, after its poller had spent the ring's
/// doorbell request, completes: the helper's timer pass of the waiting requester
/// reads the response from the ring. Before, that pass did not read (a ring, unlike
/// a socket, does not wake the helper unasked) and the Read failed RETRY_EXC_ERR
/// after the retry budget (1 s).
#[test]
fn read_completes_while_its_requester_is_not_polled() {
    let (a, b) = ring_pair();
    b.mr.write(64, b"read me!");
    leave_poller_without_arming(&a);
    let rb = b.mr.remote();
    let op = SendOp::RdmaRead {
        remote_addr: rb.addr + 64,
        rkey: rb.rkey,
    };
    post(&a, SendWr::new(2, op, &[a.mr.sge(0, 8)]));
    // Nobody polls: b's helper answers, a's helper completes the Read. Watched
    // without polling (a poll would read the ring itself).
    let deadline = Instant::now() + Duration::from_secs(10);
    while soft(&a).lock().sq.len() > 0 {
        assert!(Instant::now() < deadline, "the Read never completed");
        std::thread::yield_now();
    }
    let w = wait(&a.cq, &[]);
    assert_eq!((w.wr_id, w.status), (2, WcStatus::Success));
    assert_eq!(a.mr.to_vec(0, 8), b"read me!");
}

/// A connection that carried a 1 MiB Send and then went quiet gives the ring pages the
/// Send touched back: the receiver's inbox keeps only its first pages resident while
/// the sender's poller goes on polling.
#[test]
fn a_quiet_connection_gives_its_bulk_ring_pages_back() {
    // Every payload through the rings: with the default, a Send this large is lent.
    let (a, b) = pair_on_rings(SoftLink::Rings, SoftLink::Rings);
    const LEN: usize = 1 << 20;
    let src = a.pd.alloc_mr(LEN, ALL).unwrap();
    let dst = b.pd.alloc_mr(LEN, ALL).unwrap();
    src.write(0, &vec![5u8; LEN]);
    let sge = [dst.sge(0, LEN as u32)];
    // SAFETY: the MR outlives the test and is not touched until completion.
    unsafe {
        b.qp.post_recv(&[RecvWr {
            wr_id: 3,
            sg_list: &sge,
        }])
    }
    .unwrap();
    post(&a, SendWr::new(4, SendOp::Send, &[src.sge(0, LEN as u32)]));
    assert!(wait(&b.cq, &[&a.cq]).is_ok());
    assert!(wait(&a.cq, &[&b.cq]).is_ok());
    let resident = || with_link(&b, |l| l.inbox().unwrap().resident_pages());
    assert!(resident() > 16, "the Send did not go through the ring");
    let keep = crate::soft::shm::ring::KEEP_BYTES / 4096;
    poll_until(
        &[&a.cq, &b.cq],
        || resident() <= keep,
        || {
            format!(
                "{} ring pages still resident, expected at most {keep}",
                resident()
            )
        },
    );
}

/// Messages of many sizes queued in the ring before the reader looks, more than the
/// ring holds (so heads and payloads straddle its end, and the writer waits for
/// space), arrive whole and in order: the ring is read in place, frame by frame.
#[test]
fn messages_queued_in_the_ring_arrive_whole_and_in_order() {
    const SIZES: [usize; 6] = [0, 7, 2049, 5000, 40_000, 65_536];
    let (a, b) = ring_pair();
    let sizes: Vec<usize> = (0..60).map(|i| SIZES[i % SIZES.len()]).collect();
    let total: usize = sizes.iter().sum();
    assert!(total > crate::soft::shm::ring::RING_BYTES);
    let src = a.pd.alloc_mr(total, ALL).unwrap();
    let dst = b.pd.alloc_mr(total, ALL).unwrap();
    let data = pattern(total, 13);
    src.write(0, &data);
    let mut off = 0;
    for (i, &len) in sizes.iter().enumerate() {
        post_recv_into(&b, &dst, i as u64, off, len as u32);
        post(
            &a,
            SendWr::new(i as u64, SendOp::Send, &[src.sge(off, len as u32)]),
        );
        off += len;
    }
    for (i, &len) in sizes.iter().enumerate() {
        let wc = wait(&b.cq, &[&a.cq]);
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (i as u64, WcStatus::Success, len as u32)
        );
    }
    for i in 0..sizes.len() {
        let wc = wait(&a.cq, &[&b.cq]);
        assert_eq!((wc.wr_id, wc.status), (i as u64, WcStatus::Success));
    }
    assert!(dst.to_vec(0, total) == data, "the bytes differ");
}
