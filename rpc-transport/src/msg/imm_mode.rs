//! How a frame's 32-bit immediate travels: in the verbs immediate field, or at the
//! head of the payload on devices without immediate data (iWARP).

use crate::caps::DeviceCaps;

/// Bytes the immediate takes at the head of the payload in [`ImmMode::Header`].
pub const IMM_HEADER_LEN: usize = 4;

/// Where the 32-bit immediate of a frame travels. Both ends of a connection must use
/// the same mode (chosen from the [`DeviceCaps::common`] of both devices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ImmMode {
    /// A Send with Immediate: the value rides in the work request and arrives in the
    /// receive completion. The whole slot is payload.
    #[default]
    Immediate,
    /// A plain Send whose first [`IMM_HEADER_LEN`] bytes are the value in network byte
    /// order (as the verbs immediate is on the wire), then the payload. Each slot
    /// holds 4 payload bytes fewer than it registers.
    Header,
}

impl ImmMode {
    /// The mode a connection over devices with `caps` (the common subset of both
    /// ends) must use.
    pub fn for_caps(caps: &DeviceCaps) -> ImmMode {
        if caps.imm_data {
            ImmMode::Immediate
        } else {
            ImmMode::Header
        }
    }

    /// Bytes of each slot the mode takes from the payload.
    pub fn header_len(self) -> usize {
        match self {
            ImmMode::Immediate => 0,
            ImmMode::Header => IMM_HEADER_LEN,
        }
    }
}
