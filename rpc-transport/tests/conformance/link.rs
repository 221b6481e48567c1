//! The soft provider's link choice: two devices of one process (same host, network
//! namespace and user) carry RC over shared memory, unless TCP is forced.

use rpc_transport::{SendOp, SendWr, WcStatus};

use crate::common::link::{expect_shm, wait_link};
use crate::common::rc::RcPair;
use crate::common::{pattern, post_recv, post_send, wait_wc};

/// A pair moves to the link the run expects on both sides, and traffic larger than a
/// ring (4 MiB through a 1 MiB ring, wrapping it) arrives intact and in order.
#[test]
fn rc_pair_uses_the_expected_link_and_moves_bulk_in_order() {
    const LEN: usize = 4 << 20;
    let p = RcPair::new();
    let src = p.a.host.mr_all(LEN);
    let dst = p.b.host.mr_all(LEN);
    let note = p.b.host.mr_all(64);
    src.write(0, &pattern(LEN, 7));
    // SAFETY: `note` is read only after the receive's completion.
    unsafe { post_recv(&p.b.qp, 1, &[note.sge(0, 64)]) };
    let write = SendOp::RdmaWrite {
        remote_addr: dst.remote().addr,
        rkey: dst.remote().rkey,
    };
    let wsge = [src.sge(0, LEN as u32)];
    let ssge = [src.sge(0, 16)];
    // SAFETY: `src` outlives both completions.
    unsafe {
        post_send(&p.a.qp, SendWr::new(10, write, &wsge));
        post_send(&p.a.qp, SendWr::new(11, SendOp::Send, &ssge));
    }
    let got = wait_wc(&p.b.rcq, "the Send after the Write");
    assert_eq!(got.status, WcStatus::Success, "{got:?}");
    // RC order: the Write is in place when the Send behind it completes.
    assert!(
        dst.to_vec(0, LEN) == pattern(LEN, 7),
        "the Write's bytes differ"
    );
    for want in [10, 11] {
        let wc = wait_wc(&p.a.scq, "the sender's completions");
        assert_eq!((wc.wr_id, wc.status), (want, WcStatus::Success), "{wc:?}");
    }
    wait_link(&p.a.host.dev, &[&p.a.scq, &p.b.rcq]);
    wait_link(&p.b.host.dev, &[&p.b.scq, &p.a.scq]);
    if let Some(s) = p.a.host.dev.soft_stats() {
        assert_eq!(s.rc_shm_links, u64::from(expect_shm()));
    }
}
