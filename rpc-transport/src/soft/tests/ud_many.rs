//! Many UD QPs on one device, each with its own CQ waited on under tokio (one UD
//! session each, as rpc-core's clients make them).

use std::time::Duration;

use super::*;
use crate::{AhAttr, QpType, SendOp, SendWr, UdDest, WcStatus};

/// More than the kernel's 500 epoll sets that may watch one socket through a second
/// level: before CQs stopped all watching the device's UDP socket, the 501st CQ's
/// registration with tokio failed (`EINVAL`).
const SESSIONS: usize = 600;

/// Raises this process's descriptor limit to its hard limit: each CQ takes two.
fn enough_descriptors(need: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a live local; both calls only read or write it.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = r.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
    assert!(
        r.rlim_cur >= need,
        "this test needs {need} descriptors; the hard limit is {}",
        r.rlim_cur
    );
}

#[tokio::test(flavor = "current_thread")]
async fn six_hundred_ud_cqs_all_wait_under_tokio_and_each_gets_its_datagram() {
    enough_descriptors(3 * SESSIONS as u64 + 200);
    let dev = Device::open_soft(SoftConfig::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.alloc_mr(SESSIONS * 256, ALL).unwrap();
    let mut sessions = Vec::new();
    for i in 0..SESSIONS {
        let cq = dev.create_cq(4).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
            .unwrap();
        qp.activate_ud(0x1111, 0).unwrap();
        let sge = [mr.sge(i * 256, 256)];
        // SAFETY: the MR outlives the test; its slot is read only after completion.
        unsafe {
            qp.post_recv(&[RecvWr {
                wr_id: i as u64,
                sg_list: &sge,
            }])
        }
        .unwrap();
        sessions.push((cq, qp));
    }
    // Every CQ waits (and so is registered with tokio) before anything is sent.
    let waits: Vec<_> = sessions
        .iter()
        .map(|(cq, _)| async move {
            let mut wc = [WorkCompletion::default()];
            cq.poll_async(&mut wc).await.map(|_| wc[0])
        })
        .collect();
    let sender = side(QpType::Ud);
    sender.qp.activate_ud(0x1111, 0).unwrap();
    let ah = sender
        .pd
        .create_ah(&AhAttr::from_endpoint(
            &sessions[0].1.endpoint(0).unwrap(),
            0,
        ))
        .unwrap();
    let send_all = async {
        // Let every wait register first (one pass of the current-thread scheduler).
        tokio::task::yield_now().await;
        sender.mr.write(0, b"hi");
        let mut sent_before = 0;
        for (_, qp) in &sessions {
            let dest = UdDest {
                ah: &ah,
                remote_qpn: qp.qp_num(),
                remote_qkey: 0x1111,
            };
            post(
                &sender,
                SendWr::new(0, SendOp::Send, &[sender.mr.sge(0, 2)]).ud(dest),
            );
            assert_eq!(wait(&sender.cq, &[]).status, WcStatus::Success);
            // One datagram in flight at a time: a burst would overflow the UDP
            // socket's buffer (UD may drop; this test is about waking, not loss).
            let delivered = sent_before + 1;
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while dev.soft_stats().unwrap().ud_received < delivered {
                assert!(
                    std::time::Instant::now() < deadline,
                    "datagram not delivered"
                );
                std::thread::yield_now();
            }
            sent_before = delivered;
        }
    };
    let all = async {
        let (got, ()) = tokio::join!(futures_join_all(waits), send_all);
        got
    };
    let Ok(got) = tokio::time::timeout(Duration::from_secs(30), all).await else {
        panic!(
            "not every session got its datagram within 30 s: {:?}",
            dev.soft_stats()
        );
    };
    for (i, r) in got.into_iter().enumerate() {
        let wc = r.unwrap_or_else(|e| panic!("session {i}: {e}"));
        assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, i as u64));
    }
}

/// Awaits every future, in order (no extra dependency for `join_all`).
async fn futures_join_all<F: std::future::Future>(fs: Vec<F>) -> Vec<F::Output> {
    let mut fs: Vec<_> = fs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = fs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in fs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("ready")).collect()
}
