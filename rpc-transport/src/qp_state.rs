//! QP states, the attributes of a transition, and the verbs transition table
//! (the kernel's `qp_state_table`), checked before any provider sees a modify.

use crate::access::AccessFlags;
use crate::ah::AhAttr;
use crate::error::{Error, Result};

/// Queue pair transport type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram.
    Ud,
}

/// QP state; discriminants are ibverbs' `enum ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[allow(missing_docs)]
pub enum QpState {
    #[default]
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Err = 6,
}

/// Path MTU, as in `enum ibv_mtu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The largest MTU not above `bytes`, if any.
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        [
            Mtu::Mtu4096,
            Mtu::Mtu2048,
            Mtu::Mtu1024,
            Mtu::Mtu512,
            Mtu::Mtu256,
        ]
        .into_iter()
        .find(|m| m.bytes() <= bytes)
    }
}

/// Attributes of a QP modify (`struct ibv_qp_attr` with its mask expressed as
/// `Some`): only the fields that are `Some` are applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// Physical port (1-based).
    pub port_num: Option<u8>,
    /// Partition key index.
    pub pkey_index: Option<u16>,
    /// Q_Key (UD).
    pub qkey: Option<u32>,
    /// Remote operations this QP accepts (RC).
    pub access_flags: Option<AccessFlags>,
    /// Address vector of the remote port (RC, at RTR).
    pub dest: Option<AhAttr>,
    /// Path MTU (RC, at RTR).
    pub path_mtu: Option<Mtu>,
    /// Remote QP number (RC, at RTR).
    pub dest_qp_num: Option<u32>,
    /// Expected PSN of the first incoming packet (RC, at RTR).
    pub rq_psn: Option<u32>,
    /// Incoming RDMA Reads and atomics in flight (RC, at RTR).
    pub max_dest_rd_atomic: Option<u8>,
    /// Receiver-not-ready NAK timer code, 0..=31 (RC, at RTR).
    pub min_rnr_timer: Option<u8>,
    /// PSN of the first outgoing packet (at RTS).
    pub sq_psn: Option<u32>,
    /// Local ACK timeout code: 4.096 µs × 2^timeout, 0 = infinite (RC, at RTS).
    pub timeout: Option<u8>,
    /// Transport retries before RETRY_EXC_ERR, 0..=7 (RC, at RTS).
    pub retry_cnt: Option<u8>,
    /// RNR retries before RNR_RETRY_EXC_ERR, 0..=7, 7 = infinite (RC, at RTS).
    pub rnr_retry: Option<u8>,
    /// Outgoing RDMA Reads and atomics in flight (RC, at RTS).
    pub max_rd_atomic: Option<u8>,
}

/// Required attributes per transition and QP type; everything else is optional.
fn required(qp_type: QpType, from: QpState, to: QpState) -> &'static [&'static str] {
    use QpState::*;
    match (qp_type, from, to) {
        (QpType::Rc, Reset, Init) => &["pkey_index", "port_num", "access_flags"],
        (QpType::Ud, Reset, Init) => &["pkey_index", "port_num", "qkey"],
        (QpType::Rc, Init, Rtr) => &[
            "dest",
            "path_mtu",
            "dest_qp_num",
            "rq_psn",
            "max_dest_rd_atomic",
            "min_rnr_timer",
        ],
        (QpType::Rc, Rtr, Rts) => &[
            "sq_psn",
            "timeout",
            "retry_cnt",
            "rnr_retry",
            "max_rd_atomic",
        ],
        (QpType::Ud, Rtr, Rts) => &["sq_psn"],
        _ => &[],
    }
}

/// Whether the verbs state machine has the edge `from -> to` at all.
pub fn transition_allowed(from: QpState, to: QpState) -> bool {
    use QpState::*;
    matches!(
        (from, to),
        (_, Reset)
            | (_, Err)
            | (Reset, Init)
            | (Init, Init)
            | (Init, Rtr)
            | (Rtr, Rts)
            | (Rts, Rts)
            | (Rts, Sqd)
            | (Sqd, Sqd)
            | (Sqd, Rts)
            | (Sqe, Rts)
    )
}

impl QpAttr {
    fn has(&self, name: &str) -> bool {
        match name {
            "port_num" => self.port_num.is_some(),
            "pkey_index" => self.pkey_index.is_some(),
            "qkey" => self.qkey.is_some(),
            "access_flags" => self.access_flags.is_some(),
            "dest" => self.dest.is_some(),
            "path_mtu" => self.path_mtu.is_some(),
            "dest_qp_num" => self.dest_qp_num.is_some(),
            "rq_psn" => self.rq_psn.is_some(),
            "max_dest_rd_atomic" => self.max_dest_rd_atomic.is_some(),
            "min_rnr_timer" => self.min_rnr_timer.is_some(),
            "sq_psn" => self.sq_psn.is_some(),
            "timeout" => self.timeout.is_some(),
            "retry_cnt" => self.retry_cnt.is_some(),
            "rnr_retry" => self.rnr_retry.is_some(),
            "max_rd_atomic" => self.max_rd_atomic.is_some(),
            _ => false,
        }
    }

    /// Checks a modify against the transition table and the required attributes.
    pub fn check_transition(&self, qp_type: QpType, from: QpState, to: QpState) -> Result<()> {
        if !transition_allowed(from, to) {
            return Err(Error::InvalidTransition { from, to });
        }
        if let Some(missing) = required(qp_type, from, to).iter().find(|a| !self.has(a)) {
            return Err(Error::MissingAttribute {
                to,
                attribute: missing,
            });
        }
        if matches!(self.retry_cnt, Some(r) if r > 7) || matches!(self.rnr_retry, Some(r) if r > 7)
        {
            return Err(Error::InvalidArgument(
                "retry counts range over 0..=7".into(),
            ));
        }
        if matches!(self.min_rnr_timer, Some(t) if t > 31)
            || matches!(self.timeout, Some(t) if t > 31)
        {
            return Err(Error::InvalidArgument(
                "timer codes range over 0..=31".into(),
            ));
        }
        Ok(())
    }

    /// RESET → INIT for an RC QP accepting `access` from its peer, on port 1.
    pub fn rc_init(access: AccessFlags) -> QpAttr {
        QpAttr {
            port_num: Some(1),
            pkey_index: Some(0),
            access_flags: Some(access),
            ..QpAttr::default()
        }
    }

    /// RESET → INIT for a UD QP with Q_Key `qkey`, on port 1.
    pub fn ud_init(qkey: u32) -> QpAttr {
        QpAttr {
            port_num: Some(1),
            pkey_index: Some(0),
            qkey: Some(qkey),
            ..QpAttr::default()
        }
    }

    /// INIT → RTR for an RC QP talking to `dest` (with 16 reads in flight and an
    /// RNR NAK timer of 0.64 ms, ibv_rc_pingpong's values).
    pub fn rc_rtr(dest: AhAttr, dest_qp_num: u32, rq_psn: u32, mtu: Mtu) -> QpAttr {
        QpAttr {
            dest: Some(dest),
            path_mtu: Some(mtu),
            dest_qp_num: Some(dest_qp_num),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(12),
            ..QpAttr::default()
        }
    }

    /// RTR → RTS for an RC QP: ~67 ms ACK timeout, 7 retries, infinite RNR retries.
    pub fn rc_rts(sq_psn: u32) -> QpAttr {
        QpAttr {
            sq_psn: Some(sq_psn),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(16),
            ..QpAttr::default()
        }
    }

    /// RTR → RTS for a UD QP.
    pub fn ud_rts(sq_psn: u32) -> QpAttr {
        QpAttr {
            sq_psn: Some(sq_psn),
            ..QpAttr::default()
        }
    }
}

/// The RNR NAK timer in microseconds for an IB timer code (IBA table 45).
pub fn rnr_timer_us(code: u8) -> u32 {
    const TABLE: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    TABLE[usize::from(code & 31)]
}

/// The local ACK timeout in microseconds for a timeout code (4.096 µs × 2^code; 0 = none).
pub fn ack_timeout_us(code: u8) -> Option<u64> {
    (code != 0).then(|| (4096u64 << code.min(31)) / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::*;

    #[test]
    fn table_allows_only_verbs_edges() {
        assert!(transition_allowed(Reset, Init));
        assert!(transition_allowed(Rts, Err));
        assert!(transition_allowed(Err, Reset));
        assert!(!transition_allowed(Reset, Rtr));
        assert!(!transition_allowed(Init, Rts));
        assert!(!transition_allowed(Err, Rts));
        assert!(!transition_allowed(Rtr, Init));
    }

    #[test]
    fn missing_attribute_is_named() {
        let err = QpAttr::default()
            .check_transition(QpType::Rc, Reset, Init)
            .unwrap_err();
        assert!(matches!(
            err,
            Error::MissingAttribute {
                to: Init,
                attribute: "pkey_index"
            }
        ));
        assert!(QpAttr::rc_init(AccessFlags::empty())
            .check_transition(QpType::Rc, Reset, Init)
            .is_ok());
        assert!(QpAttr::rc_init(AccessFlags::empty())
            .check_transition(QpType::Ud, Reset, Init)
            .is_err());
        assert!(QpAttr::ud_rts(0)
            .check_transition(QpType::Rc, Rtr, Rts)
            .is_err());
        assert!(QpAttr::rc_rts(0)
            .check_transition(QpType::Rc, Rtr, Rts)
            .is_ok());
    }

    #[test]
    fn timers_decode() {
        assert_eq!(rnr_timer_us(12), 640);
        assert_eq!(rnr_timer_us(0), 655_360);
        assert_eq!(ack_timeout_us(0), None);
        assert_eq!(ack_timeout_us(14), Some(67_108));
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_bytes(3000), Some(Mtu::Mtu2048));
    }
}
