//! An SRQ shared by many QPs (the CQ epoll path) and event-driven completion.

use std::time::Duration;

use super::*;
use crate::{AsyncEvent, Device, SendOp, SendWr, SoftConfig, WcOpcode, WcStatus, WorkCompletion};

#[test]
fn srq_feeds_many_qps_in_epoll_mode_and_raises_its_limit() {
    use crate::SrqInitAttr;
    const N: usize = 8; // more than a CQ polls directly: exercises the epoll path
    let server = Device::open_soft(SoftConfig::default()).unwrap();
    let client = Device::open_soft(SoftConfig::default()).unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (
        server.create_cq(256).unwrap(),
        client.create_cq(256).unwrap(),
    );
    let srq = spd
        .create_srq(&SrqInitAttr {
            max_wr: 64,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let smr = spd.alloc_mr(64 * 64, ALL).unwrap();
    post_srq_slots(&srq, &smr, 64, 64);
    srq.arm_limit(60).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..N {
        pairs.push(srq_pair((&spd, &scq, &srq), (&cpd, &ccq)));
    }
    for (i, (_, cqp)) in pairs.iter().enumerate() {
        for j in 0..4u64 {
            let wr = SendWr::new(
                i as u64 * 10 + j,
                SendOp::SendWithImm { imm: i as u32 },
                &[],
            );
            // SAFETY: an empty gather list names no memory.
            unsafe { cqp.post_send(&[wr]) }.unwrap();
        }
    }
    let mut per_qp = std::collections::HashMap::new();
    for _ in 0..N * 4 {
        let r = wait(&scq, &[&ccq]);
        assert!(r.is_ok(), "{r:?}");
        *per_qp.entry(r.qp_num).or_insert(0) += 1;
    }
    assert!(per_qp.values().all(|&n| n == 4) && per_qp.len() == N);
    for _ in 0..N * 4 {
        assert!(wait(&ccq, &[&scq]).is_ok());
    }
    assert_eq!(
        server.try_async_event(),
        Some(AsyncEvent::SrqLimitReached(srq.id()))
    );
    assert_eq!(server.try_async_event(), None);
}

#[test]
fn poll_async_wakes_on_a_completion_from_another_thread() {
    let (a, b) = rc_pair();
    post_recv(&b, 1, 0, 64);
    let sender = std::thread::spawn(move || {
        post(&a, SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 8)]));
        assert!(wait(&a.cq, &[]).is_ok());
    });
    let mut wc = [WorkCompletion::default(); 4];
    let n = block_on(async {
        tokio::time::timeout(Duration::from_secs(10), b.cq.poll_async(&mut wc)).await
    })
    .expect("woken within 10 s")
    .unwrap();
    assert_eq!((n, wc[0].wr_id, wc[0].status), (1, 1, WcStatus::Success));
    sender.join().unwrap();
}

/// Both sides wait with `poll_async` only: no completion may be missed, whether the
/// waiter's own poll, the peer's thread or the helper produced it.
#[test]
fn event_driven_ping_pong_loses_no_wakeup() {
    const ROUNDS: u64 = 300;
    let (a, b) = rc_pair();
    let run = |s: Side, first: bool| {
        std::thread::spawn(move || {
            block_on(async {
                let mut wc = [WorkCompletion::default(); 8];
                let mut recvs = 0;
                post_recv(&s, 0, 0, 64);
                if first {
                    post(&s, SendWr::new(0, SendOp::Send, &[s.mr.sge(64, 8)]));
                }
                while recvs < ROUNDS {
                    let n = tokio::time::timeout(Duration::from_secs(10), s.cq.poll_async(&mut wc))
                        .await
                        .expect("a completion within 10 s")
                        .unwrap();
                    for w in &wc[..n] {
                        assert!(w.is_ok(), "{w:?}");
                        if w.opcode == WcOpcode::Recv {
                            recvs += 1;
                            post_recv(&s, recvs, 0, 64);
                            if !first || recvs < ROUNDS {
                                post(&s, SendWr::new(recvs, SendOp::Send, &[s.mr.sge(64, 8)]));
                            }
                        }
                    }
                }
            });
            s
        })
    };
    let (ta, tb) = (run(a, true), run(b, false));
    ta.join().unwrap();
    tb.join().unwrap();
}
