//! The devices' capabilities at the handshake, and the framing they imply.
//!
//! Each side sends its device's [`DeviceCaps`] word after its hello's or grant's
//! fields (a field of its own: the numbers in it must not be AND-merged with the
//! [`Capabilities`](super::Capabilities) set). A peer that sends none is an older
//! build, which uses immediates and has UD: [`assumed`] gives what it is taken for.
//!
//! The rule for the framing ([`ImmMode`]): a connection uses immediate data only if
//! both devices have it. A server's shared receive pools (the SRQ's, the UD QP's) are
//! built once, in its own device's mode, so a server with immediates refuses a
//! client without them ([`Reject::NoImmediateData`](super::Reject::NoImmediateData));
//! a server without immediates serves every client in header mode, and tells it so
//! in its grant (an older client, which sent no device word and knows no header
//! mode, is refused: `Reject::ClientTooOldForHeaderFraming`).

use rpc_transport::msg::ImmMode;
use rpc_transport::DeviceCaps;

/// What a peer that sent `sent` is taken for: itself, or for an older peer (none
/// sent) a device with immediates and UD.
pub fn assumed(sent: Option<DeviceCaps>) -> PeerDevice {
    match sent {
        Some(d) => PeerDevice {
            imm_data: d.imm_data,
            ud: d.ud,
        },
        None => PeerDevice {
            imm_data: true,
            ud: true,
        },
    }
}

/// What the framing needs to know of a peer's device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerDevice {
    /// Send with Immediate works.
    pub imm_data: bool,
    /// UD QPs can be created.
    pub ud: bool,
}

/// The framing of a connection between a device with `local` caps and a peer that
/// sent `peer` (module docs: immediates only if both have them).
pub fn imm_mode(local: &DeviceCaps, peer: Option<DeviceCaps>) -> ImmMode {
    if local.imm_data && assumed(peer).imm_data {
        ImmMode::Immediate
    } else {
        ImmMode::Header
    }
}
