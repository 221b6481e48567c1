//! RDMA Write, Write-with-Immediate and Read into and from a remote memory region.

use rpc_transport::{SendOp, SendWr, WcOpcode, WcStatus};

use crate::common::{has_imm_or_refuses, pattern, post_recv, post_send, wait_wc, RcPair};

#[test]
fn rdma_write_lands_in_remote_mr_without_consuming_a_receive() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(4096);
    let target = p.b.host.mr_all(8192);
    let rbuf = p.b.host.mr_all(64);
    let data = pattern(3000, 7);
    src.write(0, &data);
    src.write(3000, b"after");
    let remote = target.remote();

    // SAFETY: `rbuf` is read only after completion.
    unsafe { post_recv(&p.b.qp, 1, &[rbuf.sge(0, 64)]) };
    let wsge = [src.sge(0, 3000)];
    let write = SendOp::RdmaWrite {
        remote_addr: remote.addr + 1000,
        rkey: remote.rkey,
    };
    // SAFETY: `src` is unchanged until both WRs complete.
    unsafe { post_send(&p.a.qp, SendWr::new(1, write, &wsge)) };
    let ssge = [src.sge(3000, 5)];
    // SAFETY: as above.
    unsafe { post_send(&p.a.qp, SendWr::new(2, SendOp::Send, &ssge)) };

    let wwc = wait_wc(&p.a.scq, "the write's completion");
    assert_eq!(wwc.status, WcStatus::Success, "{wwc:?}");
    assert_eq!((wwc.wr_id, wwc.opcode), (1, WcOpcode::RdmaWrite));
    // The only receive went to the Send: the Write consumed none.
    let rwc = wait_wc(&p.b.rcq, "the send's receive");
    assert_eq!(rwc.status, WcStatus::Success, "{rwc:?}");
    assert_eq!((rwc.opcode, rwc.byte_len), (WcOpcode::Recv, 5));
    assert_eq!(rbuf.to_vec(0, 5), b"after");
    // RC order: the Write is visible once the later Send has arrived.
    assert_eq!(target.to_vec(1000, 3000), data);
    assert!(target.to_vec(0, 1000).iter().all(|&b| b == 0));
    assert!(target.to_vec(4000, 4192).iter().all(|&b| b == 0));
    assert!(wait_wc(&p.a.scq, "the send's completion").is_ok());
}

#[test]
fn rdma_write_with_imm_consumes_a_receive_and_delivers_imm() {
    let p = RcPair::new();
    let src = p.a.host.mr_all(4096);
    let target = p.b.host.mr_all(4096);
    let rbuf = p.b.host.mr_all(64);
    let data = pattern(2048, 3);
    src.write(0, &data);
    let remote = target.remote();
    let probe = SendOp::RdmaWriteWithImm {
        remote_addr: remote.addr,
        rkey: remote.rkey,
        imm: 1,
    };
    if !has_imm_or_refuses(&p, probe) {
        return;
    }

    // SAFETY: `rbuf` is read only after completion.
    unsafe { post_recv(&p.b.qp, 42, &[rbuf.sge(0, 64)]) };
    let sge = [src.sge(0, 2048)];
    let op = SendOp::RdmaWriteWithImm {
        remote_addr: remote.addr + 512,
        rkey: remote.rkey,
        imm: 0x0102_0304,
    };
    // SAFETY: `src` is unchanged until completion.
    unsafe { post_send(&p.a.qp, SendWr::new(8, op, &sge)) };

    let rwc = wait_wc(&p.b.rcq, "the receive consumed by the write");
    assert_eq!(rwc.status, WcStatus::Success, "{rwc:?}");
    assert_eq!(rwc.wr_id, 42);
    assert_eq!(rwc.opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(rwc.imm_data, Some(0x0102_0304));
    assert_eq!(rwc.byte_len, 2048, "byte_len is the written length");
    assert_eq!(rwc.qp_num, p.b.qp.qp_num());
    assert_eq!(target.to_vec(512, 2048), data);
    assert!(
        rbuf.to_vec(0, 64).iter().all(|&b| b == 0),
        "the receive buffer is not written by a Write-with-Imm"
    );
    let swc = wait_wc(&p.a.scq, "the write's completion");
    assert_eq!(swc.status, WcStatus::Success, "{swc:?}");
    assert_eq!((swc.wr_id, swc.opcode), (8, WcOpcode::RdmaWrite));
}

#[test]
fn rdma_read_fetches_remote_bytes() {
    let p = RcPair::new();
    let local = p.a.host.mr_all(8192);
    let source = p.b.host.mr_all(8192);
    let data = pattern(5000, 11);
    source.write(3000, &data);
    let remote = source.remote();

    let sge = [local.sge(100, 5000)];
    let op = SendOp::RdmaRead {
        remote_addr: remote.addr + 3000,
        rkey: remote.rkey,
    };
    // SAFETY: `local` is neither read nor written until the read completes.
    unsafe { post_send(&p.a.qp, SendWr::new(4, op, &sge)) };

    let wc = wait_wc(&p.a.scq, "the read's completion");
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!((wc.wr_id, wc.opcode), (4, WcOpcode::RdmaRead));
    assert_eq!(wc.byte_len, 5000);
    assert_eq!(wc.qp_num, p.a.qp.qp_num());
    assert_eq!(local.to_vec(100, 5000), data);
    assert!(local.to_vec(0, 100).iter().all(|&b| b == 0));
    assert!(local.to_vec(5100, 3092).iter().all(|&b| b == 0));
}
