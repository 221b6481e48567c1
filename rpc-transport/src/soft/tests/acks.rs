//! ACKs owed by a poller that goes to sleep (`rc::ACKS_BEFORE_SLEEP`).

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use super::shm::ring_pair;
use super::*;
use crate::{SendOp, WcStatus};

/// A poller that received several Sends and then sleeps (it spun first, as rpc-core's
/// drivers do: `wait_async` after a short batch) acknowledges them before it sleeps:
/// the sender's next poll completes them all. Before, the ACK waited for the
/// sleeper's helper tick (1 ms and more), and a sender whose completions free its
/// slots stalled as long. On rings, the sleeper's ACK is in the sender's inbox once
/// its last pass returns, so one poll of the sender finds it.
#[test]
fn a_poller_about_to_sleep_acknowledges_the_sends_it_received() {
    const SENDS: u64 = 3;
    let (a, b) = ring_pair();
    block_on(async {
        for i in 0..SENDS {
            post_recv(&b, i, 0, 64);
        }
        for i in 0..SENDS {
            post(&a, SendWr::new(i, SendOp::Send, &[a.mr.sge(0, 8)]));
        }
        let mut wc = [WorkCompletion::default(); 8];
        let mut received = 0;
        while received < SENDS {
            let n = tokio::time::timeout(Duration::from_secs(10), b.cq.wait_async(&mut wc))
                .await
                .expect("the Sends arrived within 10 s")
                .unwrap();
            assert!(wc[..n].iter().all(|w| w.status == WcStatus::Success));
            received += n as u64;
        }
        // b spins once (a plain poll withdraws its requests to be rung), then sleeps.
        assert_eq!(b.cq.poll(&mut wc).unwrap(), 0);
        let mut sleep = pin!(b.cq.wait_async(&mut wc));
        let pending = std::future::poll_fn(|cx| Poll::Ready(sleep.as_mut().poll(cx).is_pending()));
        assert!(
            pending.await,
            "b found a completion with nothing sent to it"
        );

        let mut done = [WorkCompletion::default(); 8];
        let n = a.cq.poll(&mut done).unwrap();
        assert_eq!(
            n as u64, SENDS,
            "a's Sends were not all complete at its first poll after b slept"
        );
        assert!(done[..n].iter().all(|w| w.status == WcStatus::Success));
    });
}
