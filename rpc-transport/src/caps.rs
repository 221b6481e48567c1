//! What a device can do: one [`DeviceCaps`] value per opened device, detected by the
//! provider ([`crate::Device::caps`]), with a compact `u64` form for the handshake.
//!
//! # Why it matters to rdma-rpc
//! rdma-rpc's wire carries each frame's kind and call id in the 32-bit immediate of a
//! Send-with-Immediate, and its `rdma+ud://` transport needs UD. RDMA's three fabrics
//! differ on exactly these: InfiniBand and RoCE have both; iWARP (RFC 5040 RDMAP, and
//! Linux's `siw`) has no immediate data and no UD; some cloud devices (Alibaba's
//! eRDMA) are RC only. The message layer has a framing for devices without immediate
//! data ([`crate::msg::ImmMode::Header`]: the 32 bits travel at the head of the
//! payload instead); what the layers above must still do is below.
//!
//! # What rpc-core must do next
//! `docs/fabrics.md` has the details and the evidence; in short:
//! 1. **Exchange capabilities at the handshake**: each side sends
//!    [`DeviceCaps::to_bits`] (in a field of its own: the handshake's capability set
//!    is AND-combined, which suits the feature bits but not the numbers); both use
//!    [`crate::msg::ImmMode::for_caps`] of [`DeviceCaps::common`] for that
//!    connection's rings and pools, and read immediates with
//!    [`crate::msg::RecvSlot::imm`].
//! 2. **`rdma+ud://` on a device without UD** falls back to RC with one info line,
//!    or against `accept_rc(false)` fails at once with a status naming the reason;
//!    creating the UD QP fails with `EOPNOTSUPP` on both providers, the signal.
//! 3. **iWARP connects through `rdma_cm`**: `siw` refuses RTS to a QP that
//!    `ibv_modify_qp` drives by hand (no socket: only its connection manager hands it
//!    one), so rdma-rpc's out-of-band exchange of [`crate::QpEndpoint`]s cannot
//!    connect an iWARP QP; the TCP handshake stays for version, capabilities and
//!    liveness, and the QP comes from `rdma_create_qp`/`rdma_connect`. The active
//!    side sends first (MPA), which rdma-rpc's client, whose request is always a
//!    connection's first frame, already does.

use std::fmt;

/// The fabric a device runs on (from its transport type and the port's link layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fabric {
    /// Not known (a provider this crate does not classify, or two different fabrics
    /// combined by [`DeviceCaps::common`]).
    Unknown,
    /// InfiniBand: LID-routed, immediate data and UD.
    InfiniBand,
    /// RoCE (IB transport over Ethernet, including the kernel's SoftRoCE `rxe`).
    Roce,
    /// iWARP (RDMAP over TCP, e.g. the kernel's soft-iWARP `siw`): RC only, and no
    /// immediate data.
    Iwarp,
    /// This crate's own soft provider (RC over TCP, UD over UDP).
    Soft,
}

impl Fabric {
    fn code(self) -> u64 {
        match self {
            Fabric::Unknown => 0,
            Fabric::InfiniBand => 1,
            Fabric::Roce => 2,
            Fabric::Iwarp => 3,
            Fabric::Soft => 4,
        }
    }

    fn from_code(c: u64) -> Fabric {
        match c {
            1 => Fabric::InfiniBand,
            2 => Fabric::Roce,
            3 => Fabric::Iwarp,
            4 => Fabric::Soft,
            _ => Fabric::Unknown,
        }
    }
}

impl fmt::Display for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fabric::Unknown => "unknown",
            Fabric::InfiniBand => "InfiniBand",
            Fabric::Roce => "RoCE",
            Fabric::Iwarp => "iWARP",
            Fabric::Soft => "soft",
        })
    }
}

/// What an opened device can do, as far as rdma-rpc cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceCaps {
    /// The fabric.
    pub fabric: Fabric,
    /// Send with Immediate and RDMA Write with Immediate work.
    pub imm_data: bool,
    /// Unreliable Datagram QPs can be created.
    pub ud: bool,
    /// 64-bit remote atomics (Fetch-and-Add, Compare-and-Swap) work.
    pub atomics: bool,
    /// Shared receive queues can be created.
    pub srq: bool,
    /// Type-2 memory windows can be allocated, bound and invalidated by WRs
    /// ([`crate::mw`]).
    pub mw_type2: bool,
    /// Largest inline payload of an RC send (0: no inline sends).
    pub max_inline: u32,
    /// Largest number of scatter/gather entries per work request.
    pub max_sge: u32,
    /// Largest message of port 1 in bytes, when the provider says.
    pub max_msg_size: Option<u32>,
}

// The u64 wire form. Feature bits (a set bit means "has it", so AND is the common
// subset) in the low byte; numbers in fields above, saturated to their width.
const BIT_IMM: u64 = 1 << 0;
const BIT_UD: u64 = 1 << 1;
const BIT_ATOMICS: u64 = 1 << 2;
const BIT_SRQ: u64 = 1 << 3;
const BIT_MW2: u64 = 1 << 4;
const FABRIC_SHIFT: u32 = 8; // 4 bits
const INLINE_SHIFT: u32 = 16; // 16 bits
const SGE_SHIFT: u32 = 32; // 8 bits
const MSG_SHIFT: u32 = 40; // 6 bits: log2 of max_msg_size, 0 = unknown

impl DeviceCaps {
    /// The compact form for the handshake. Numbers saturate to their field (inline to
    /// 65535, SGEs to 255) and `max_msg_size` rounds down to a power of two, so a
    /// decoded value never promises more than the device has.
    pub fn to_bits(&self) -> u64 {
        let flag = |on: bool, bit: u64| if on { bit } else { 0 };
        let msg = match self.max_msg_size {
            Some(n) if n > 0 => u64::from(31 - n.leading_zeros()) + 1,
            _ => 0,
        };
        flag(self.imm_data, BIT_IMM)
            | flag(self.ud, BIT_UD)
            | flag(self.atomics, BIT_ATOMICS)
            | flag(self.srq, BIT_SRQ)
            | flag(self.mw_type2, BIT_MW2)
            | self.fabric.code() << FABRIC_SHIFT
            | u64::from(self.max_inline.min(0xffff)) << INLINE_SHIFT
            | u64::from(self.max_sge.min(0xff)) << SGE_SHIFT
            | msg << MSG_SHIFT
    }

    /// Decodes [`DeviceCaps::to_bits`]. Bits this build does not know are ignored (a
    /// newer peer may set them).
    pub fn from_bits(bits: u64) -> DeviceCaps {
        let msg = (bits >> MSG_SHIFT) & 0x3f;
        DeviceCaps {
            fabric: Fabric::from_code((bits >> FABRIC_SHIFT) & 0xf),
            imm_data: bits & BIT_IMM != 0,
            ud: bits & BIT_UD != 0,
            atomics: bits & BIT_ATOMICS != 0,
            srq: bits & BIT_SRQ != 0,
            mw_type2: bits & BIT_MW2 != 0,
            max_inline: ((bits >> INLINE_SHIFT) & 0xffff) as u32,
            max_sge: ((bits >> SGE_SHIFT) & 0xff) as u32,
            max_msg_size: match msg {
                0 => None,
                // 1..=32 encode 2^0..=2^31; larger values only from a corrupt field.
                m if m <= 32 => Some(1u32 << (m - 1)),
                _ => Some(1u32 << 31),
            },
        }
    }

    /// What a connection between devices `a` and `b` can use: features both have,
    /// the smaller of each limit, and the fabric if both share it.
    pub fn common(a: &DeviceCaps, b: &DeviceCaps) -> DeviceCaps {
        DeviceCaps {
            fabric: if a.fabric == b.fabric {
                a.fabric
            } else {
                Fabric::Unknown
            },
            imm_data: a.imm_data && b.imm_data,
            ud: a.ud && b.ud,
            atomics: a.atomics && b.atomics,
            srq: a.srq && b.srq,
            mw_type2: a.mw_type2 && b.mw_type2,
            max_inline: a.max_inline.min(b.max_inline),
            max_sge: a.max_sge.min(b.max_sge),
            max_msg_size: match (a.max_msg_size, b.max_msg_size) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            },
        }
    }
}

impl fmt::Display for DeviceCaps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yn = |b: bool| if b { "yes" } else { "no" };
        write!(
            f,
            "fabric {}, immediate data {}, UD {}, atomics {}, SRQ {}, memory windows {}, max inline {}, max SGE {}, max message ",
            self.fabric,
            yn(self.imm_data),
            yn(self.ud),
            yn(self.atomics),
            yn(self.srq),
            yn(self.mw_type2),
            self.max_inline,
            self.max_sge
        )?;
        match self.max_msg_size {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("unknown"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roce() -> DeviceCaps {
        DeviceCaps {
            fabric: Fabric::Roce,
            imm_data: true,
            ud: true,
            atomics: true,
            srq: true,
            mw_type2: true,
            max_inline: 256,
            max_sge: 32,
            max_msg_size: Some(1 << 31),
        }
    }

    fn iwarp() -> DeviceCaps {
        DeviceCaps {
            fabric: Fabric::Iwarp,
            imm_data: false,
            ud: false,
            atomics: false,
            srq: true,
            mw_type2: false,
            max_inline: 1024,
            max_sge: 6,
            max_msg_size: Some(1 << 30),
        }
    }

    #[test]
    fn bits_round_trip_every_field() {
        for c in [roce(), iwarp()] {
            assert_eq!(DeviceCaps::from_bits(c.to_bits()), c);
        }
        let none = DeviceCaps {
            fabric: Fabric::Unknown,
            imm_data: false,
            ud: false,
            atomics: false,
            srq: false,
            mw_type2: false,
            max_inline: 0,
            max_sge: 0,
            max_msg_size: None,
        };
        assert_eq!(none.to_bits(), 0);
        assert_eq!(DeviceCaps::from_bits(0), none);
    }

    #[test]
    fn bits_never_promise_more_than_the_device_has() {
        let mut c = roce();
        c.max_inline = 100_000;
        c.max_sge = 1000;
        c.max_msg_size = Some(3 << 20);
        let d = DeviceCaps::from_bits(c.to_bits());
        assert_eq!(d.max_inline, 0xffff);
        assert_eq!(d.max_sge, 255);
        assert_eq!(
            d.max_msg_size,
            Some(2 << 20),
            "rounds down to a power of two"
        );
    }

    #[test]
    fn unknown_bits_from_a_newer_peer_are_ignored() {
        let bits = roce().to_bits() | 1 << 7 | 1 << 63;
        assert_eq!(DeviceCaps::from_bits(bits), roce());
    }

    #[test]
    fn common_keeps_what_both_have() {
        let c = DeviceCaps::common(&roce(), &iwarp());
        assert_eq!(c.fabric, Fabric::Unknown);
        assert!(!c.imm_data && !c.ud && !c.atomics);
        assert!(c.srq && !c.mw_type2);
        assert_eq!((c.max_inline, c.max_sge), (256, 6));
        assert_eq!(c.max_msg_size, Some(1 << 30));
        assert_eq!(DeviceCaps::common(&roce(), &roce()), roce());
        let mut unknown = roce();
        unknown.max_msg_size = None;
        assert_eq!(
            DeviceCaps::common(&unknown, &iwarp()).max_msg_size,
            Some(1 << 30)
        );
    }

    #[test]
    fn display_names_the_missing_features() {
        let s = iwarp().to_string();
        assert!(s.contains("iWARP") && s.contains("immediate data no") && s.contains("UD no"));
    }
}
