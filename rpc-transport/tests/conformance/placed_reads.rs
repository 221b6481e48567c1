//! A requester process that dies while this side answers its RDMA Reads. On the soft
//! provider's shared-memory link the responder places those bytes straight into the
//! requester's memory (`process_vm_writev`); its death must end the responder's QP
//! exactly as a closed connection does, whichever it notices first.
//!
//! The other direction, a responder killed while its provider places Read responses,
//! is the soft provider's alone (on a NIC the kernel answers Reads, not the process):
//! `soft::tests::killed_responder` in the library's unit tests.

use rpc_transport::{RcRetry, SendOp, SendWr, WcStatus};

use crate::common::child::{hear, mr_from_text, say};
use crate::common::link::{expect_direct, wait_link};
use crate::common::rc::{connect, PSN_B};
use crate::common::wait::Deadline;
use crate::common::{pattern, post_send, wait_wc, RcOpts, RcSide};

/// Bytes of each RDMA Read the reading child keeps asking for.
const READ_LEN: usize = 16 << 20;

fn opts() -> RcOpts {
    // As `two_process::rc_peer_killed_mid_transfer_ends_qp_in_err`: 6, not 7 (rxe
    // takes 7 as "retry forever").
    RcOpts {
        retry: RcRetry {
            ack_timeout: 14,
            retry_cnt: 6,
        },
        ..RcOpts::default()
    }
}

/// The child reads `READ_LEN` bytes of this side's region again and again until it is
/// killed; this side, the responder, then has a Send outstanding to it. The Send ends
/// RETRY_EXC_ERR (or, on iWARP, which completes a Send once TCP has it, Success), the
/// posted receive is flushed and the QP is in ERR, with QP_FATAL on the soft provider:
/// the completions of a peer killed on TCP.
#[test]
fn requester_killed_while_its_reads_are_answered_ends_qp_in_err() {
    let opts = opts();
    let a = RcSide::new(&opts);
    let region = a.host.mr_all(READ_LEN);
    region.write(0, &pattern(READ_LEN, 4));
    let buf = a.host.mr_all(64);
    let mut peer = a.accept_child("reader", &region, &buf, &opts);
    // The child checked its first Read byte for byte before it says so.
    peer.recv("reading");
    wait_link(&a.host.dev, &[&a.scq, &a.rcq]);
    if let Some(s) = a.host.dev.soft_stats() {
        if expect_direct() {
            // The first Reads may go out before the link moved to shared memory; the
            // child's later ones are placed (the helper answers them meanwhile).
            let placed = || a.host.dev.soft_stats().expect("soft").rc_read_bytes_placed;
            let deadline = Deadline::start();
            while placed() < READ_LEN as u64 {
                deadline.tick(|| format!("a whole Read placed directly ({} bytes)", placed()));
            }
        } else {
            assert_eq!(s.rc_read_bytes_placed, 0, "placed with direct copies off");
        }
    }
    // SAFETY: `buf` outlives the Send's completion.
    unsafe { post_send(&a.qp, SendWr::new(2, SendOp::Send, &[buf.sge(0, 8)])) };
    peer.kill();
    a.expect_send_ended_by_dead_peer("the Send to the killed requester");
    a.expect_ended_by_dead_peer("after the requester died");
}

/// Reads the parent's region into its own again and again until killed.
pub fn reader_child() {
    let opts = opts();
    let b = RcSide::new(&opts);
    let dst = b.host.mr_all(READ_LEN);
    say("ep", &b.qp.endpoint(PSN_B).expect("endpoint").to_string());
    let ep_a = hear("ep").parse().expect("endpoint record");
    let mr_a = mr_from_text(&hear("mr"));
    connect(&b.qp, PSN_B, &ep_a, &opts);
    let sge = [dst.sge(0, READ_LEN as u32)];
    let read = SendOp::RdmaRead {
        remote_addr: mr_a.addr,
        rkey: mr_a.rkey,
    };
    for i in 0u64.. {
        // SAFETY: `dst` lives until this process is killed; it is read only after
        // the first Read's completion.
        unsafe { post_send(&b.qp, SendWr::new(i, read, &sge)) };
        let wc = wait_wc(&b.scq, "a Read");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        if i == 0 {
            assert!(
                dst.to_vec(0, READ_LEN) == pattern(READ_LEN, 4),
                "the Read's bytes differ"
            );
            say("reading", "");
        }
    }
}
