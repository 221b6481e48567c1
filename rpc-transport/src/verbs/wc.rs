//! `struct ibv_wc` to [`WorkCompletion`].

use super::ffi;
use crate::wc::{WcOpcode, WcStatus, WorkCompletion};

/// Maps one polled completion. For error completions ibverbs defines only `wr_id`,
/// `status`, `qp_num` and `vendor_err`; the rest is copied as the provider left it.
pub(super) fn from_raw(wc: &ffi::ibv_wc) -> WorkCompletion {
    let flags = ffi::ibv_wc_flags(wc.wc_flags);
    let has = |f: ffi::ibv_wc_flags| (flags & f).0 != 0;
    WorkCompletion {
        wr_id: wc.wr_id,
        status: WcStatus::from_raw(wc.status),
        opcode: opcode_from_raw(wc.opcode),
        byte_len: wc.byte_len,
        // SAFETY: with IBV_WC_WITH_IMM the union holds `imm_data` (network order); both
        // members are plain u32s, so the read is sound either way.
        imm_data: has(ffi::ibv_wc_flags::IBV_WC_WITH_IMM)
            .then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data })),
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        grh: has(ffi::ibv_wc_flags::IBV_WC_GRH),
        vendor_err: wc.vendor_err,
    }
}

fn opcode_from_raw(op: ffi::ibv_wc_opcode::Type) -> WcOpcode {
    use ffi::ibv_wc_opcode as O;
    match op {
        O::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        O::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        O::IBV_WC_COMP_SWAP => WcOpcode::CompSwap,
        O::IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
        O::IBV_WC_BIND_MW => WcOpcode::BindMw,
        O::IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
        O::IBV_WC_RECV => WcOpcode::Recv,
        O::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        // IBV_WC_SEND, and opcodes we never post (TSO).
        _ => WcOpcode::Send,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(opcode: u32, flags: u32, imm_be: u32) -> ffi::ibv_wc {
        ffi::ibv_wc {
            wr_id: 7,
            status: 0,
            opcode,
            vendor_err: 0,
            byte_len: 40 + 5,
            imm_data_invalidated_rkey_union: ffi::imm_data_invalidated_rkey_union_t {
                imm_data: imm_be,
            },
            qp_num: 0x11,
            src_qp: 0x22,
            wc_flags: flags,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        }
    }

    #[test]
    fn immediate_arrives_in_host_order_only_when_flagged() {
        let wc = from_raw(&raw(
            ffi::ibv_wc_opcode::IBV_WC_RECV,
            2,
            0x1234_5678u32.to_be(),
        ));
        assert_eq!(wc.imm_data, Some(0x1234_5678));
        assert_eq!(wc.opcode, WcOpcode::Recv);
        assert!(!wc.grh);
        let wc = from_raw(&raw(ffi::ibv_wc_opcode::IBV_WC_RECV, 1, 99));
        assert_eq!(wc.imm_data, None);
        assert!(wc.grh);
        assert_eq!(
            (wc.wr_id, wc.qp_num, wc.src_qp, wc.byte_len),
            (7, 0x11, 0x22, 45)
        );
    }

    #[test]
    fn opcodes_and_statuses_map() {
        let mut r = raw(ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM, 0, 0);
        r.status = ffi::ibv_wc_status::IBV_WC_REM_ACCESS_ERR;
        let wc = from_raw(&r);
        assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!(wc.status, WcStatus::RemAccessErr);
        assert_eq!(
            from_raw(&raw(ffi::ibv_wc_opcode::IBV_WC_FETCH_ADD, 0, 0)).opcode,
            WcOpcode::FetchAdd
        );
    }
}
