//! Large RC transfers: payloads moved between the socket and registered memory
//! directly, chunked, resumed after partial writes, and discarded (stream kept in
//! sync) when a check refuses them.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::*;
use crate::qp::QpImp;
use crate::{RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus};

use super::super::rc::CHUNK;

fn soft_qp(qp: &QueuePair) -> &super::super::Qp {
    #[allow(unreachable_patterns)]
    match &qp.imp {
        QpImp::Soft(q) => q,
        _ => panic!("not a soft QP"),
    }
}

/// The QP's TCP socket, once its connection is up (both sides are driven meanwhile).
fn rc_socket(s: &Side, peer: &Side) -> RawFd {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(fd) = soft_qp(&s.qp).rc_fd() {
            return fd;
        }
        let _ = s.cq.poll(&mut []);
        let _ = peer.cq.poll(&mut []);
        assert!(Instant::now() < deadline, "no RC connection within 10 s");
        std::thread::yield_now();
    }
}

fn set_buf(fd: RawFd, opt: libc::c_int, bytes: libc::c_int) {
    // SAFETY: a valid socket and an `int` option value that lives for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

fn post_recv_sges(s: &Side, wr_id: u64, sges: &[Sge]) {
    // SAFETY: the MRs outlive the test and are not touched until completion.
    unsafe {
        s.qp.post_recv(&[RecvWr {
            wr_id,
            sg_list: sges,
        }])
    }
    .unwrap();
}

/// Polls `cq` (driving `others`) until `n` completions; returns them in order.
fn wait_n(cq: &CompletionQueue, others: &[&CompletionQueue], n: usize) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    let mut wc = [WorkCompletion::default(); 16];
    while got.len() < n {
        for o in others {
            let _ = o.poll(&mut []);
        }
        let k = cq.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
        assert!(
            Instant::now() < deadline,
            "{} of {n} completions",
            got.len()
        );
        std::thread::yield_now();
    }
    got
}

#[test]
fn four_mib_through_a_tiny_send_buffer_arrive_byte_for_byte() {
    let (a, b) = rc_pair();
    for (s, peer) in [(&a, &b), (&b, &a)] {
        let fd = rc_socket(s, peer);
        // Twice this (the kernel doubles it) is about one chunk and a bit: every pass
        // that offers more than the receiver took so far ends in a partial write,
        // stopping inside heads and payloads. (Much smaller buffers, below one
        // loopback MSS of 64 KiB, stall on the peer's delayed ACKs for seconds.)
        set_buf(fd, libc::SO_SNDBUF, 40_000);
        set_buf(fd, libc::SO_RCVBUF, 40_000);
    }
    const LEN: usize = 4 << 20;
    let src = a.pd.alloc_mr(LEN, ALL).unwrap();
    let dst = b.pd.alloc_mr(3 * LEN, ALL).unwrap();
    let data = pattern(LEN, 7);
    src.write(0, &data);

    // Send, into a receive of three uneven SGEs.
    let (x, y) = (1_000_003usize, 2_000_029usize);
    let sges = [
        dst.sge(0, x as u32),
        dst.sge(x, y as u32),
        dst.sge(x + y, (LEN - x - y) as u32),
    ];
    post_recv_sges(&b, 1, &sges);
    post(&a, SendWr::new(2, SendOp::Send, &[src.sge(0, LEN as u32)]));
    let r = wait(&b.cq, &[&a.cq]);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, LEN as u32));
    assert!(dst.to_vec(0, LEN) == data, "Send data differs");
    assert!(wait(&a.cq, &[&b.cq]).is_ok());

    // Write and Read, each verified byte for byte.
    let rd = dst.remote();
    let op = SendOp::RdmaWrite {
        remote_addr: rd.addr + LEN as u64,
        rkey: rd.rkey,
    };
    post(&a, SendWr::new(3, op, &[src.sge(0, LEN as u32)]));
    assert!(wait(&a.cq, &[&b.cq]).is_ok());
    assert!(dst.to_vec(LEN, LEN) == data, "Write data differs");

    let back = pattern(LEN, 99);
    dst.write(2 * LEN, &back);
    let op = SendOp::RdmaRead {
        remote_addr: rd.addr + 2 * LEN as u64,
        rkey: rd.rkey,
    };
    post(&a, SendWr::new(4, op, &[src.sge(0, LEN as u32)]));
    let r = wait(&a.cq, &[&b.cq]);
    assert_eq!(
        (r.status, r.opcode),
        (WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert!(src.to_vec(0, LEN) == back, "Read data differs");
    assert_eq!(a.dev.soft_stats().unwrap().rc_frames_malformed, 0);
}

#[test]
fn small_sends_overtake_a_large_read_response_on_the_same_qp() {
    let (a, b) = rc_pair();
    // Larger than what loopback socket buffers hold, so that the Read response is
    // still being produced when b's Sends are posted.
    const LEN: usize = 32 << 20;
    let local = a.pd.alloc_mr(LEN, ALL).unwrap();
    let remote = b.pd.alloc_mr(LEN, ALL).unwrap();
    let data = pattern(LEN, 3);
    remote.write(0, &data);
    for i in 0..3 {
        post_recv(&a, 100 + i, 64 * i as usize, 64);
    }
    let r = remote.remote();
    let op = SendOp::RdmaRead {
        remote_addr: r.addr,
        rkey: r.rkey,
    };
    post(
        &a,
        SendWr::new(1, op, &[local.sge(0, LEN as u32)]).flags(crate::SendFlags::SIGNALED),
    );
    // b takes the request and starts answering it; then it sends three small messages.
    let deadline = Instant::now() + Duration::from_secs(10);
    while soft_qp(&b.qp).lock().rc.as_ref().unwrap().expected() == 0 {
        let _ = b.cq.poll(&mut []);
        assert!(Instant::now() < deadline, "the Read request did not arrive");
        std::thread::yield_now();
    }
    for i in 0..3u64 {
        b.mr.write(i as usize * 8, &i.to_be_bytes());
        post(
            &b,
            SendWr::new(10 + i, SendOp::Send, &[b.mr.sge(i as usize * 8, 8)]),
        );
    }
    // a's completions: the three receives, then the Read. The Read completes when
    // its last byte has landed, so this order says that the Sends overtook the rest
    // of the response in the byte stream. (Not checked by reading a's memory once the
    // Sends arrived: a's helper thread may land the rest of the response before the
    // test thread looks, on a loaded machine.)
    let mut got = wait_n(&a.cq, &[&b.cq], 3);
    got.extend(wait_n(&a.cq, &[&b.cq], 1));
    let order: Vec<(u64, WcOpcode)> = got.iter().map(|w| (w.wr_id, w.opcode)).collect();
    assert_eq!(
        order,
        [
            (100, WcOpcode::Recv),
            (101, WcOpcode::Recv),
            (102, WcOpcode::Recv),
            (1, WcOpcode::RdmaRead)
        ]
    );
    assert!(got.iter().all(|w| w.is_ok()), "{got:?}");
    for i in 0..3u64 {
        assert_eq!(a.mr.to_vec(64 * i as usize, 8), i.to_be_bytes());
    }
    assert!(local.to_vec(0, LEN) == data, "Read data differs");
    assert_eq!(wait_n(&b.cq, &[&a.cq], 3).len(), 3);
}

#[test]
fn a_large_write_with_a_bad_rkey_writes_nothing_and_fails_as_today() {
    let (a, b) = rc_pair();
    const LEN: usize = 4 << 20;
    let src = a.pd.alloc_mr(LEN, ALL).unwrap();
    src.write(0, &pattern(LEN, 1));
    let target = b.pd.alloc_mr(LEN, ALL).unwrap();
    let t = target.remote();
    let op = SendOp::RdmaWrite {
        remote_addr: t.addr,
        rkey: t.rkey ^ 0x100, // another slot's key
    };
    post(&a, SendWr::new(1, op, &[src.sge(0, LEN as u32)]));
    let w = wait(&a.cq, &[&b.cq]);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemAccessErr));
    // The responder NAKs and goes to ERR (as rxe); the rest of the payload is read off
    // the stream frame by frame, never misread as frame heads.
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.qp.state() != QpState::Err || a.qp.state() != QpState::Err {
        let _ = b.cq.poll(&mut []);
        let _ = a.cq.poll(&mut []);
        assert!(Instant::now() < deadline, "QPs did not reach ERR");
        std::thread::yield_now();
    }
    for _ in 0..100 {
        let _ = b.cq.poll(&mut []);
    }
    assert!(
        target.to_vec(0, LEN).iter().all(|&x| x == 0),
        "bytes landed"
    );
    assert_eq!(b.dev.soft_stats().unwrap().rc_frames_malformed, 0);
    assert_eq!(a.dev.soft_stats().unwrap().rc_frames_malformed, 0);

    // Another QP pair between the same devices carries a large Write intact.
    let c = second_qp(&a);
    let d = second_qp(&b);
    connect(&c, &d, 7, 1, 14);
    connect(&d, &c, 7, 1, 14);
    let op = SendOp::RdmaWrite {
        remote_addr: t.addr,
        rkey: t.rkey,
    };
    post(&c, SendWr::new(2, op, &[src.sge(0, LEN as u32)]));
    assert!(wait(&c.cq, &[&d.cq]).is_ok());
    assert!(
        target.to_vec(0, LEN) == pattern(LEN, 1),
        "Write data differs"
    );
}

/// A second QP (with its own CQ and small MR) on the device of `s`.
fn second_qp(s: &Side) -> Side {
    let dev = s.dev.clone();
    let pd = s.pd.clone();
    let cq = dev.create_cq(64).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let mr = pd.alloc_mr(4096, ALL).unwrap();
    Side {
        dev,
        pd,
        cq,
        qp,
        mr,
    }
}

#[test]
fn a_large_send_refused_for_lack_of_a_receive_is_skipped_then_retried() {
    let (a, b) = rc_pair();
    const LEN: usize = 3 * CHUNK + 5;
    let src = a.pd.alloc_mr(LEN, ALL).unwrap();
    let dst = b.pd.alloc_mr(LEN, ALL).unwrap();
    let data = pattern(LEN, 11);
    src.write(0, &data);
    post(&a, SendWr::new(1, SendOp::Send, &[src.sge(0, LEN as u32)]));
    // b answers RNR and drops the payload; the retry finds the receive.
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.dev.soft_stats().unwrap().rc_rnr_naks == 0 {
        let _ = b.cq.poll(&mut []);
        let _ = a.cq.poll(&mut []);
        assert!(Instant::now() < deadline, "no RNR NAK");
        std::thread::yield_now();
    }
    post_recv_sges(&b, 2, &[dst.sge(0, LEN as u32)]);
    let r = wait(&b.cq, &[&a.cq]);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, LEN as u32));
    assert!(dst.to_vec(0, LEN) == data, "Send data differs");
    assert!(wait(&a.cq, &[&b.cq]).is_ok());
    assert_eq!(b.dev.soft_stats().unwrap().rc_frames_malformed, 0);
}

#[test]
fn payloads_around_the_chunk_size_arrive_intact() {
    let (a, b) = rc_pair();
    const MAX: usize = 2 * CHUNK + 2;
    let src = a.pd.alloc_mr(MAX, ALL).unwrap();
    let dst = b.pd.alloc_mr(MAX, ALL).unwrap();
    let rd = dst.remote();
    let sizes = [
        0,
        1,
        1023,
        1024,
        1025,
        2047,
        2048,
        4095,
        4097,
        CHUNK - 1,
        CHUNK,
        CHUNK + 1,
        2 * CHUNK - 1,
        2 * CHUNK,
        2 * CHUNK + 2,
    ];
    for (k, &len) in sizes.iter().enumerate() {
        let data = pattern(len, k as u32);
        src.write(0, &data);
        // The local side in two SGEs split off-centre, so pieces cross SGE ends.
        let cut = len / 3;
        let local = [src.sge(0, cut as u32), src.sge(cut, (len - cut) as u32)];
        let remote_sges = [
            dst.sge(0, (len - cut) as u32),
            dst.sge(len - cut, cut as u32),
        ];
        post_recv_sges(&b, k as u64, &remote_sges);
        post(&a, SendWr::new(1, SendOp::Send, &local));
        let r = wait(&b.cq, &[&a.cq]);
        assert_eq!((r.status, r.byte_len), (WcStatus::Success, len as u32));
        assert!(dst.to_vec(0, len) == data, "Send of {len} differs");
        assert!(wait(&a.cq, &[&b.cq]).is_ok());

        let data = pattern(len, 1000 + k as u32);
        src.write(0, &data);
        let op = SendOp::RdmaWrite {
            remote_addr: rd.addr,
            rkey: rd.rkey,
        };
        post(&a, SendWr::new(2, op, &local));
        assert!(wait(&a.cq, &[&b.cq]).is_ok());
        assert!(dst.to_vec(0, len) == data, "Write of {len} differs");

        let data = pattern(len, 2000 + k as u32);
        dst.write(0, &data);
        let op = SendOp::RdmaRead {
            remote_addr: rd.addr,
            rkey: rd.rkey,
        };
        post(&a, SendWr::new(3, op, &local));
        let r = wait(&a.cq, &[&b.cq]);
        assert_eq!((r.status, r.wr_id), (WcStatus::Success, 3));
        assert!(src.to_vec(0, len) == data, "Read of {len} differs");
    }
}

/// Fairness among connections and within one: two 64 MiB Reads in flight on two QPs
/// between the same devices, and small Sends both on one of those QPs (posted by the
/// side answering its Read, so they share the byte stream with the response) and on
/// a third QP that carries nothing else. The Sends on the Read's own connection
/// complete before the Read: they waited behind a chunk and what the (shrunk) socket
/// buffers hold, not behind the transfer. Everything lands byte for byte.
///
/// How far ahead of the Read's end they arrive is timing (a test thread descheduled
/// while the helper drives the QPs sees the Read get ahead: checking that they
/// arrived before half of it failed under load on main), so it is measured by the
/// `soft_mixed` example, not asserted here.
#[test]
fn small_sends_keep_moving_beside_two_64_mib_reads() {
    const LEN: usize = 64 << 20;
    const SMALL: u64 = 4;
    let (a1, b1) = rc_pair();
    let (a2, b2, a3, b3) = (
        second_qp(&a1),
        second_qp(&b1),
        second_qp(&a1),
        second_qp(&b1),
    );
    for (s, peer) in [(&a2, &b2), (&b2, &a2), (&a3, &b3), (&b3, &a3)] {
        connect(s, peer, 7, 1, 14);
    }
    for (s, peer) in [(&b1, &a1), (&a1, &b1), (&b2, &a2), (&a2, &b2)] {
        let fd = rc_socket(s, peer);
        set_buf(fd, libc::SO_SNDBUF, 40_000);
        set_buf(fd, libc::SO_RCVBUF, 40_000);
    }
    let all_cqs = [&a1.cq, &b1.cq, &a2.cq, &b2.cq, &a3.cq, &b3.cq];
    let data: Vec<Vec<u8>> = (0..2).map(|k| pattern(LEN, 40 + k)).collect();
    for a in [&a1, &a3] {
        for i in 0..SMALL {
            post_recv(a, 100 + i, 64 * i as usize, 64);
        }
    }
    // Read 1 (on the second QP) first, then Read 0; each runs once its responder has
    // taken the request. Waiting for b1, only b1 is polled: its response can then get
    // no further ahead of its small Sends than the socket buffers and a chunk.
    let mut locals = Vec::new();
    for (k, (a, b)) in [(&a1, &b1), (&a2, &b2)].into_iter().enumerate() {
        let local = a.pd.alloc_mr(LEN, ALL).unwrap();
        let remote = b.pd.alloc_mr(LEN, ALL).unwrap();
        remote.write(0, &data[k]);
        locals.push((local, remote));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for k in [1, 0] {
        let (a, b) = [(&a1, &b1), (&a2, &b2)][k];
        let (local, remote) = &locals[k];
        let r = remote.remote();
        let op = SendOp::RdmaRead {
            remote_addr: r.addr,
            rkey: r.rkey,
        };
        post(a, SendWr::new(1, op, &[local.sge(0, LEN as u32)]));
        while soft_qp(&b.qp).lock().rc.as_ref().unwrap().expected() == 0 {
            let _ = b.cq.poll(&mut []);
            if k == 1 {
                let _ = a.cq.poll(&mut []);
            }
            assert!(
                Instant::now() < deadline,
                "Read {k}'s request did not arrive"
            );
            std::thread::yield_now();
        }
    }
    for b in [&b1, &b3] {
        for i in 0..SMALL {
            b.mr.write(i as usize * 8, &i.to_be_bytes());
            post(
                b,
                SendWr::new(10 + i, SendOp::Send, &[b.mr.sge(i as usize * 8, 8)]),
            );
        }
    }
    let others = |me: &CompletionQueue| -> Vec<&CompletionQueue> {
        all_cqs
            .into_iter()
            .filter(|c| !std::ptr::eq(*c, me))
            .collect()
    };
    let mut got1 = wait_n(&a1.cq, &others(&a1.cq), SMALL as usize);
    got1.extend(wait_n(
        &a1.cq,
        &others(&a1.cq),
        SMALL as usize + 1 - got1.len(),
    ));
    let got3 = wait_n(&a3.cq, &others(&a3.cq), SMALL as usize);
    let got2 = wait_n(&a2.cq, &others(&a2.cq), 1);
    let order = |got: &[WorkCompletion]| -> Vec<(u64, WcOpcode)> {
        assert!(got.iter().all(|w| w.is_ok()), "{got:?}");
        got.iter().map(|w| (w.wr_id, w.opcode)).collect()
    };
    let recvs: Vec<(u64, WcOpcode)> = (0..SMALL).map(|i| (100 + i, WcOpcode::Recv)).collect();
    let mut then_read = recvs.clone();
    then_read.push((1, WcOpcode::RdmaRead));
    assert_eq!(order(&got1), then_read);
    assert_eq!(order(&got2), [(1, WcOpcode::RdmaRead)]);
    assert_eq!(order(&got3), recvs);
    for a in [&a1, &a3] {
        for i in 0..SMALL {
            assert_eq!(a.mr.to_vec(64 * i as usize, 8), i.to_be_bytes());
        }
    }
    for (k, (local, _)) in locals.iter().enumerate() {
        assert!(local.to_vec(0, LEN) == data[k], "Read {k} data differs");
    }
}
