//! Doorbells on the shared-memory link: none while both sides poll, one for a side
//! that sleeps. A doorbell is an eventfd write by one side and a read by the other,
//! so these tests count system calls per message (`SoftStats::rc_shm_doorbells`).

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use super::shm::{ring_pair, with_link};
use super::*;
use crate::{SendOp, WcStatus};

fn doorbells(s: &Side) -> u64 {
    s.dev.soft_stats().unwrap().rc_shm_doorbells
}

/// A conversation between two pollers that spin (each slept once: armed its CQ and
/// polled, which asks the peer to ring) rings at most the first doorbell each way,
/// not one per message: a poller that polls again withdraws its request. Before,
/// every poll of an armed CQ renewed it and every message rang (2 per message
/// here). The bound leaves room for what a stall of this thread rightly causes: the
/// helper taking over a side not polled for 1 ms asks to be rung, and a writer
/// whose bytes sat unread for 1 ms rings anyway.
#[test]
fn spinning_pollers_ring_no_doorbell_per_message() {
    const ROUNDS: u64 = 1000;
    let (a, b) = ring_pair();
    for s in [&a, &b] {
        s.cq.req_notify(false).unwrap();
        let _ = s.cq.poll(&mut []);
        assert!(
            with_link(s, |l| l.inbox().unwrap().flags().0),
            "a poller that armed its CQ and polled did not ask to be rung"
        );
    }
    let before = doorbells(&a) + doorbells(&b);
    for i in 0..ROUNDS {
        for (s, peer) in [(&a, &b), (&b, &a)] {
            post_recv(peer, i, 0, 64);
            post(s, SendWr::new(i, SendOp::Send, &[s.mr.sge(0, 32)]));
            let r = wait(&peer.cq, &[&s.cq]);
            assert_eq!((r.wr_id, r.status), (i, WcStatus::Success));
            assert_eq!(wait(&s.cq, &[&peer.cq]).status, WcStatus::Success);
        }
    }
    let rung = doorbells(&a) + doorbells(&b) - before;
    let messages = 2 * ROUNDS;
    assert!(
        rung <= messages / 4,
        "{rung} doorbells for {messages} messages between two spinning pollers"
    );
}

/// A poller that was woken, spun (polls that withdrew its request to ring), and then
/// sleeps again without arming anew (`wait_async` after a short batch, as rpc-core's
/// drivers do) asks to be rung once more: the peer's next Send rings its doorbell at
/// once (without, nothing rang until the peer's 1 ms unread nudge) and wakes it.
#[test]
fn a_poller_that_spun_asks_to_be_rung_when_it_sleeps() {
    let (a, b) = ring_pair();
    block_on(async {
        let mut wc = [WorkCompletion::default(); 4];
        post_recv(&b, 1, 0, 64);
        post(&a, SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)]));
        // Arms, polls, returns the receive (a short batch: the CQ stays armed).
        let n = tokio::time::timeout(Duration::from_secs(10), b.cq.wait_async(&mut wc))
            .await
            .expect("the first Send arrived within 10 s")
            .unwrap();
        assert_eq!((n, wc[0].wr_id), (1, 1));
        // b spins while a's Send completes: nothing is outstanding on a afterwards.
        assert_eq!(wait(&a.cq, &[&b.cq]).status, WcStatus::Success);
        post_recv(&b, 2, 0, 64);

        let n = {
            let mut sleep = pin!(b.cq.wait_async(&mut wc));
            let pending =
                std::future::poll_fn(|cx| Poll::Ready(sleep.as_mut().poll(cx).is_pending()));
            assert!(pending.await, "b found a completion before a sent one");
            let before = doorbells(&a);
            post(&a, SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 8)]));
            assert_eq!(
                doorbells(&a) - before,
                1,
                "the Send to a sleeping poller did not ring its doorbell"
            );
            tokio::time::timeout(Duration::from_secs(10), sleep)
                .await
                .expect("the sleeping poller was not woken within 10 s")
                .unwrap()
        };
        assert_eq!((n, wc[0].wr_id, wc[0].status), (1, 2, WcStatus::Success));
    });
}
