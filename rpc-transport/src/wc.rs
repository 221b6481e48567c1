//! Work completions, as in `struct ibv_wc`.

use std::fmt;

/// Completion status; the discriminants are ibverbs' `enum ibv_wc_status` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
#[allow(missing_docs)] // names and meanings are ibverbs'
pub enum WcStatus {
    #[default]
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
    TmErr = 22,
    TmRndvIncomplete = 23,
}

impl WcStatus {
    /// Maps an ibverbs status value; unknown values become `GeneralErr`.
    pub fn from_raw(v: u32) -> WcStatus {
        use WcStatus::*;
        const ALL: [WcStatus; 24] = [
            Success,
            LocLenErr,
            LocQpOpErr,
            LocEecOpErr,
            LocProtErr,
            WrFlushErr,
            MwBindErr,
            BadRespErr,
            LocAccessErr,
            RemInvReqErr,
            RemAccessErr,
            RemOpErr,
            RetryExcErr,
            RnrRetryExcErr,
            LocRddViolErr,
            RemInvRdReqErr,
            RemAbortErr,
            InvEecnErr,
            InvEecStateErr,
            FatalErr,
            RespTimeoutErr,
            GeneralErr,
            TmErr,
            TmRndvIncomplete,
        ];
        ALL.get(v as usize).copied().unwrap_or(GeneralErr)
    }

    /// ibverbs' `ibv_wc_status_str` text.
    pub fn as_str(self) -> &'static str {
        use WcStatus::*;
        match self {
            Success => "success",
            LocLenErr => "local length error",
            LocQpOpErr => "local QP operation error",
            LocEecOpErr => "local EE context operation error",
            LocProtErr => "local protection error",
            WrFlushErr => "Work Request Flushed Error",
            MwBindErr => "memory management operation error",
            BadRespErr => "bad response error",
            LocAccessErr => "local access error",
            RemInvReqErr => "remote invalid request error",
            RemAccessErr => "remote access error",
            RemOpErr => "remote operation error",
            RetryExcErr => "transport retry counter exceeded",
            RnrRetryExcErr => "RNR retry counter exceeded",
            LocRddViolErr => "local RDD violation error",
            RemInvRdReqErr => "remote invalid RD request",
            RemAbortErr => "aborted error",
            InvEecnErr => "invalid EE context number",
            InvEecStateErr => "invalid EE context state",
            FatalErr => "fatal error",
            RespTimeoutErr => "response timeout error",
            GeneralErr => "general error",
            TmErr => "TM error",
            TmRndvIncomplete => "TM software rendezvous",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What completed; mirrors `enum ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[allow(missing_docs)]
pub enum WcOpcode {
    #[default]
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    /// A memory window bound (`IBV_WC_BIND_MW`).
    BindMw,
    /// A remote key invalidated (`IBV_WC_LOCAL_INV`).
    LocalInv,
    /// A receive consumed by a Send.
    Recv,
    /// A receive consumed by an RDMA Write with immediate.
    RecvRdmaWithImm,
}

/// One completion.
///
/// For errors other than on the first failing WR, ibverbs only guarantees `wr_id`,
/// `status`, `qp_num` (and `vendor_err`); the other fields are then meaningless.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The WR's `wr_id`.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receives; for UD including the 40-byte GRH area) or read.
    pub byte_len: u32,
    /// Immediate data, when the sender sent some.
    pub imm_data: Option<u32>,
    /// Local QP the WR belonged to.
    pub qp_num: u32,
    /// Sender's QP number (UD receives).
    pub src_qp: u32,
    /// A GRH is present in the first 40 bytes of the receive buffer (UD).
    pub grh: bool,
    /// Provider-specific error detail.
    pub vendor_err: u32,
}

impl WorkCompletion {
    /// Whether the WR succeeded.
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_values_match_ibverbs() {
        assert_eq!(WcStatus::from_raw(5), WcStatus::WrFlushErr);
        assert_eq!(WcStatus::from_raw(13), WcStatus::RnrRetryExcErr);
        assert_eq!(WcStatus::RemAccessErr as u32, 10);
        assert_eq!(WcStatus::from_raw(999), WcStatus::GeneralErr);
    }
}
