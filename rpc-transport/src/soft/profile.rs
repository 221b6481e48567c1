//! Profiles: a soft device that pretends to lack what some fabrics lack, and refuses
//! it exactly as such a device does, so the layers above can be tested for iWARP and
//! RC-only devices without one.
//!
//! | profile | immediate data | UD | atomics | models |
//! | --- | --- | --- | --- | --- |
//! | `full` | yes | yes | yes | InfiniBand / RoCE |
//! | `iwarp_like` | no | no | no | iWARP (`siw`; RFC 5040 has no immediate) |
//! | `rc_only` | yes | no | yes | RC-only cloud devices (e.g. eRDMA) |
//! | `ib` | yes | yes | yes | an InfiniBand port: a LID, LID-routed address vectors (no GRH) |
//!
//! The refusals follow Linux's `siw`: creating a UD QP fails with `EOPNOTSUPP`
//! (`siw_create_qp`: "only RC QP's supported"), and posting an opcode the device
//! lacks fails synchronously with `EINVAL` on that WR (`siw_post_send`'s default
//! case), here [`PostError::Unsupported`].

use std::io;
use std::str::FromStr;

use crate::caps::{DeviceCaps, Fabric};
use crate::error::{Error, PostError, Result};
use crate::qp_state::QpType;
use crate::wr::SendOp;

use super::device::{Device, MAX_INLINE, MAX_SGE};

/// Environment variable that picks the profile of every soft device opened without
/// an explicit one ([`crate::Device::open_soft`], [`crate::Device::open`] of
/// `soft0`, [`crate::Device::open_default`]): `full` (or unset), `iwarp_like`,
/// `rc_only`, `ib`. Any other value makes those opens fail with an error naming it.
pub const SOFT_PROFILE_ENV: &str = "RDMA_RPC_SOFT_PROFILE";

/// What a soft device offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SoftProfile {
    /// Everything: immediate data, UD, atomics.
    #[default]
    Full,
    /// An iWARP device: no immediate data, no UD, no atomics.
    IwarpLike,
    /// An RC-only device: no UD.
    RcOnly,
    /// Everything, on an InfiniBand port: it has a LID (unique among the process's
    /// soft devices), and address vectors without a GRH are routed by LID
    /// ([`crate::AhAttr::from_endpoint`] makes such ones for endpoints with a LID).
    Ib,
}

impl SoftProfile {
    /// Every profile, for tests that run on each.
    pub const ALL: [SoftProfile; 4] = [
        SoftProfile::Full,
        SoftProfile::IwarpLike,
        SoftProfile::RcOnly,
        SoftProfile::Ib,
    ];

    /// The profile named by [`SOFT_PROFILE_ENV`] (`Full` when unset or empty, as a
    /// shell's `VAR= cmd` means "no profile").
    pub fn from_env() -> Result<SoftProfile> {
        match std::env::var(SOFT_PROFILE_ENV) {
            Ok(v) if v.is_empty() => Ok(SoftProfile::Full),
            Ok(v) => v.parse(),
            Err(std::env::VarError::NotPresent) => Ok(SoftProfile::Full),
            Err(std::env::VarError::NotUnicode(v)) => Err(Error::InvalidArgument(format!(
                "${SOFT_PROFILE_ENV}={v:?} is not a soft device profile"
            ))),
        }
    }

    /// The name `FromStr` accepts.
    pub fn name(self) -> &'static str {
        match self {
            SoftProfile::Full => "full",
            SoftProfile::IwarpLike => "iwarp_like",
            SoftProfile::RcOnly => "rc_only",
            SoftProfile::Ib => "ib",
        }
    }

    /// Send and RDMA Write with immediate work.
    pub fn imm_data(self) -> bool {
        self != SoftProfile::IwarpLike
    }

    /// UD QPs can be created.
    pub fn ud(self) -> bool {
        matches!(self, SoftProfile::Full | SoftProfile::Ib)
    }

    /// The port is an InfiniBand port with a LID.
    pub fn infiniband(self) -> bool {
        self == SoftProfile::Ib
    }

    /// Remote atomics work.
    pub fn atomics(self) -> bool {
        self != SoftProfile::IwarpLike
    }

    /// Type-2 memory windows work (siw, which `iwarp_like` follows, has none).
    pub fn memory_windows(self) -> bool {
        self != SoftProfile::IwarpLike
    }

    /// Refuses a QP type the profile lacks, as `ibv_create_qp` does.
    pub(crate) fn check_qp_type(self, t: QpType) -> Result<()> {
        if t == QpType::Ud && !self.ud() {
            // The bare errno, as the verbs provider reports a real device's refusal,
            // so callers can tell "no UD here" the same way on both.
            tracing::debug!(profile = self.name(), "soft device refuses a UD QP");
            return Err(Error::verb(
                "ibv_create_qp",
                io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            ));
        }
        Ok(())
    }

    /// Refuses an opcode the profile lacks, as `ibv_post_send` does. On every post:
    /// the full profile answers with one comparison.
    #[inline]
    pub(crate) fn check_op(self, op: &SendOp) -> std::result::Result<(), PostError> {
        if matches!(self, SoftProfile::Full | SoftProfile::Ib) {
            return Ok(());
        }
        self.check_op_partial(op)
    }

    #[cold]
    fn check_op_partial(self, op: &SendOp) -> std::result::Result<(), PostError> {
        let ok = match op {
            SendOp::SendWithImm { .. } | SendOp::RdmaWriteWithImm { .. } => self.imm_data(),
            SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. } => self.atomics(),
            SendOp::BindMw(_) | SendOp::LocalInv { .. } => self.memory_windows(),
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(PostError::Unsupported)
        }
    }
}

impl Device {
    /// The soft device's own truth, under its profile.
    pub(crate) fn caps(&self) -> DeviceCaps {
        let p = self.profile;
        DeviceCaps {
            fabric: if p.infiniband() {
                Fabric::InfiniBand
            } else {
                Fabric::Soft
            },
            imm_data: p.imm_data(),
            ud: p.ud(),
            atomics: p.atomics(),
            srq: true,
            mw_type2: p.memory_windows(),
            max_inline: MAX_INLINE,
            max_sge: MAX_SGE as u32,
            // An RC message may be up to 2^31 bytes (`check_send`); UD is bounded
            // by the port MTU instead.
            max_msg_size: Some(1 << 31),
        }
    }
}

impl FromStr for SoftProfile {
    type Err = Error;

    fn from_str(s: &str) -> Result<SoftProfile> {
        SoftProfile::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "soft device profile {s:?} (from ${SOFT_PROFILE_ENV}?) is none of full, iwarp_like, rc_only, ib"
                ))
            })
    }
}

impl std::fmt::Display for SoftProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_are_refused() {
        for p in SoftProfile::ALL {
            assert_eq!(p.name().parse::<SoftProfile>().unwrap(), p);
        }
        let e = "iwarp".parse::<SoftProfile>().unwrap_err().to_string();
        assert!(
            e.contains("iwarp_like") && e.contains(SOFT_PROFILE_ENV),
            "{e}"
        );
    }

    #[test]
    fn iwarp_like_refuses_immediates_atomics_and_ud() {
        let p = SoftProfile::IwarpLike;
        let imm = SendOp::SendWithImm { imm: 1 };
        let fa = SendOp::FetchAdd {
            remote_addr: 0,
            rkey: 0,
            add: 1,
        };
        assert_eq!(p.check_op(&imm), Err(PostError::Unsupported));
        assert_eq!(p.check_op(&fa), Err(PostError::Unsupported));
        assert_eq!(p.check_op(&SendOp::Send), Ok(()));
        match p.check_qp_type(QpType::Ud) {
            Err(Error::Verb { verb, source }) => {
                assert_eq!(verb, "ibv_create_qp");
                assert_eq!(source.raw_os_error(), Some(libc::EOPNOTSUPP));
            }
            other => panic!("expected EOPNOTSUPP from ibv_create_qp, got {other:?}"),
        }
        assert!(p.check_qp_type(QpType::Rc).is_ok());
        assert!(SoftProfile::RcOnly.check_op(&imm).is_ok());
        assert!(SoftProfile::RcOnly.check_qp_type(QpType::Ud).is_err());
        assert!(SoftProfile::Full.check_qp_type(QpType::Ud).is_ok());
    }

    #[test]
    fn each_profile_reports_what_it_offers_in_caps_and_attr() {
        for p in SoftProfile::ALL {
            let dev = crate::Device::open_soft_with(crate::SoftConfig::default(), p).unwrap();
            let caps = dev.caps();
            let fabric = if p == SoftProfile::Ib {
                Fabric::InfiniBand
            } else {
                Fabric::Soft
            };
            assert_eq!(caps.fabric, fabric, "{p}");
            assert_eq!(
                dev.port_attr(1).unwrap().lid != 0,
                p == SoftProfile::Ib,
                "{p}"
            );
            assert_eq!(
                (caps.imm_data, caps.ud, caps.atomics),
                (p.imm_data(), p.ud(), p.atomics()),
                "{p}"
            );
            assert_eq!(dev.attr().atomics, caps.atomics, "{p}");
            assert_eq!(caps.max_inline, MAX_INLINE);
            assert_eq!(caps.max_sge, dev.attr().max_sge);
        }
        let iw = DeviceCaps::from_bits(
            crate::Device::open_soft_with(crate::SoftConfig::default(), SoftProfile::IwarpLike)
                .unwrap()
                .caps()
                .to_bits(),
        );
        assert!(!iw.imm_data && !iw.ud && !iw.atomics && iw.srq);
    }
}
