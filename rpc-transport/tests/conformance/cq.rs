//! Completion queues: overrun is an error, and `poll_async` sleeps until woken.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use rpc_transport::{AsyncEvent, Error, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};

use crate::common::link::wait_link;
use crate::common::wait::{drain_events, Deadline};
use crate::common::{post_recv, post_send, wait_wc, RcOpts, RcPair, DEADLINE};

#[test]
fn cq_overrun_is_reported() {
    let p = RcPair::with(RcOpts {
        send_cqe: 4,
        ..RcOpts::default()
    });
    let cap = p.a.scq.capacity() as usize;
    let writes = cap + 4;
    assert!(
        writes < p.a.qp.cap().max_send_wr as usize,
        "CQ capacity {cap}"
    );
    let src = p.a.host.mr_all(64);
    let target = p.b.host.mr_all(64);
    let rbuf = p.b.host.mr_all(64);
    let r = target.remote();

    // SAFETY: `rbuf` is read only after completion.
    unsafe { post_recv(&p.b.qp, 1, &[rbuf.sge(0, 64)]) };
    let sge = [src.sge(0, 8)];
    let write = SendOp::RdmaWrite {
        remote_addr: r.addr,
        rkey: r.rkey,
    };
    let mut wrs: Vec<SendWr> = (0..writes as u64)
        .map(|i| SendWr::new(i, write, &sge))
        .collect();
    wrs.push(SendWr::new(writes as u64, SendOp::Send, &sge));
    // SAFETY: `src` is never written; it lives until the end of the test.
    unsafe { p.a.qp.post_send(&wrs) }.expect("post_send");
    // RC order: once the Send arrived, every write before it was executed, and the
    // requester has (or is about to have) a completion for each: more than fit.
    assert!(wait_wc(&p.b.rcq, "the trailing send").is_ok());

    let overrun = AsyncEvent::CqErr(p.a.scq.id());
    let deadline = Deadline::start();
    let mut delivered = Vec::new();
    let mut one = [WorkCompletion::default()];
    loop {
        if drain_events(&p.a.host.dev).contains(&overrun) {
            return;
        }
        match p.a.scq.poll(&mut one) {
            Err(Error::CqOverrun) => return,
            Err(e) => panic!("poll failed with {e:?}, expected CqOverrun"),
            Ok(n) => delivered.extend_from_slice(&one[..n]),
        }
        assert!(
            delivered.len() <= writes,
            "all {} completions came through a CQ of capacity {cap} without an overrun",
            wrs.len()
        );
        deadline.tick(|| format!("CqOverrun from poll or a CqErr event; polled {delivered:?}"));
    }
}

/// Counts the wake-ups delivered to the wrapped future.
struct CountWakes<F> {
    inner: Pin<Box<F>>,
    wakes: Arc<WakeCounter>,
}

struct WakeCounter {
    count: AtomicUsize,
    waker: std::sync::Mutex<Option<Waker>>,
}

impl Wake for WakeCounter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.count.fetch_add(1, Ordering::SeqCst);
        if let Some(w) = self.waker.lock().unwrap().as_ref() {
            w.wake_by_ref();
        }
    }
}

impl<F: Future> Future for CountWakes<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        *self.wakes.waker.lock().unwrap() = Some(cx.waker().clone());
        let waker = Waker::from(self.wakes.clone());
        self.inner.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

#[test]
fn poll_async_sleeps_until_a_peer_completion_wakes_it() {
    let p = RcPair::new();
    // The shared-memory handshake's answer wakes the CQ it arrives on (its socket is in
    // the CQ's epoll set): let it land before the idle window counts wakes.
    for side in [&p.a, &p.b] {
        wait_link(&side.host.dev, &[&side.scq, &side.rcq]);
    }
    let src = p.a.host.mr_all(64);
    let dst = p.b.host.mr_all(64);
    src.write(0, b"wake up");
    // SAFETY: `dst` is read only after completion.
    unsafe { post_recv(&p.b.qp, 3, &[dst.sge(0, 64)]) };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let mut wc = [WorkCompletion::default(); 4];
        let wakes = Arc::new(WakeCounter {
            count: AtomicUsize::new(0),
            waker: std::sync::Mutex::new(None),
        });
        let mut fut = CountWakes {
            inner: Box::pin(p.b.rcq.poll_async(&mut wc)),
            wakes: wakes.clone(),
        };
        let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut fut).poll(cx))).await;
        assert!(first.is_pending(), "completed with nothing sent: {first:?}");
        // Give the runtime turns with nothing to deliver: a waiting future stays asleep,
        // a busy loop in disguise wakes itself.
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let idle = wakes.count.load(Ordering::SeqCst);
        assert_eq!(
            idle, 0,
            "poll_async woke {idle} times with nothing to deliver"
        );

        let sge = [src.sge(0, 7)];
        // SAFETY: `src` is unchanged until the send completes.
        unsafe { post_send(&p.a.qp, SendWr::new(1, SendOp::Send, &sge)) };
        let n = tokio::time::timeout(DEADLINE, fut)
            .await
            .expect("poll_async was not woken by the peer's send")
            .expect("poll_async");
        assert!(wakes.count.load(Ordering::SeqCst) >= 1);
        assert_eq!(n, 1);
        assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
        assert_eq!((wc[0].wr_id, wc[0].opcode), (3, WcOpcode::Recv));
    });
    assert_eq!(dst.to_vec(0, 7), b"wake up");
    assert!(wait_wc(&p.a.scq, "the send's completion").is_ok());
}
