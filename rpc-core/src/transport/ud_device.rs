//! What both ends of a UD session take from the device: the Q_Key and the payload limit.

use rpc_transport::Device;

use crate::transport::Error;

/// Q_Key of every rdma-rpc UD QP (high bit clear: a real Q_Key, not "use the QP's").
pub(crate) const QKEY: u32 = 0x5252_5043;
/// Largest datagram rdma-rpc uses, whatever the MTU.
const MAX_DATAGRAM: usize = 4096;

/// The UD payload limit of `dev`'s port 1: its active MTU (capped at 4096). The GRH
/// takes 40 bytes of each receive buffer, not of the MTU.
pub(crate) fn datagram_limit(dev: &Device) -> Result<usize, Error> {
    let mtu = dev.port_attr(1)?.active_mtu.bytes() as usize;
    Ok(mtu.min(MAX_DATAGRAM))
}
