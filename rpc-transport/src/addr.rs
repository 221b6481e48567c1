//! Addresses: GIDs and the endpoint record two peers exchange out of band.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::str::FromStr;

use crate::error::{Error, Result};

/// A 128-bit global identifier, as in `union ibv_gid`.
///
/// On RoCE it is an IPv6 or IPv4-mapped address. The soft provider's GID is its
/// IPv4-mapped address with the device's port in the first two bytes (big endian),
/// so a GID alone is enough to reach a soft device (see [`Gid::soft`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The soft provider's GID for a device listening on `addr`.
    pub fn soft(addr: SocketAddrV4) -> Gid {
        let mut raw = addr.ip().to_ipv6_mapped().octets();
        raw[0..2].copy_from_slice(&addr.port().to_be_bytes());
        Gid(raw)
    }

    /// The socket address of a soft device named by this GID, if it is one.
    pub fn soft_addr(&self) -> Option<SocketAddrV4> {
        let g = &self.0;
        if g[2..10].iter().any(|&b| b != 0) || g[10] != 0xff || g[11] != 0xff {
            return None;
        }
        let port = u16::from_be_bytes([g[0], g[1]]);
        let ip = Ipv4Addr::new(g[12], g[13], g[14], g[15]);
        Some(SocketAddrV4::new(ip, port))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Everything a peer needs to connect a QP to this one (what ibv_rc_pingpong calls
/// the destination: LID, QPN, PSN, GID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpEndpoint {
    /// Local identifier (InfiniBand; 0 on RoCE and soft).
    pub lid: u16,
    /// Queue pair number.
    pub qpn: u32,
    /// Initial packet sequence number of this QP's send queue.
    pub psn: u32,
    /// Global identifier of the port the QP lives on.
    pub gid: Gid,
}

impl QpEndpoint {
    /// Wire size of [`QpEndpoint::to_bytes`].
    pub const WIRE_LEN: usize = 2 + 4 + 4 + 16;

    /// Fixed-size big-endian encoding, for out-of-band exchanges.
    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0u8; Self::WIRE_LEN];
        b[0..2].copy_from_slice(&self.lid.to_be_bytes());
        b[2..6].copy_from_slice(&self.qpn.to_be_bytes());
        b[6..10].copy_from_slice(&self.psn.to_be_bytes());
        b[10..26].copy_from_slice(&self.gid.0);
        b
    }

    /// Inverse of [`QpEndpoint::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        if b.len() != Self::WIRE_LEN {
            return Err(Error::InvalidArgument(format!(
                "QP endpoint record is {} bytes, expected {}",
                b.len(),
                Self::WIRE_LEN
            )));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[10..26]);
        Ok(QpEndpoint {
            lid: u16::from_be_bytes([b[0], b[1]]),
            qpn: u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
            psn: u32::from_be_bytes([b[6], b[7], b[8], b[9]]),
            gid: Gid(gid),
        })
    }
}

/// Text form `LID:QPN:PSN:GID` with hex numbers, as ibv_rc_pingpong prints them.
impl fmt::Display for QpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:06x}:{:06x}:", self.lid, self.qpn, self.psn)?;
        for b in self.gid.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl FromStr for QpEndpoint {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidArgument(format!("not a QP endpoint: {s:?}"));
        let mut it = s.trim().split(':');
        let mut hex = |max_len: usize| -> Result<u32> {
            let part = it.next().ok_or_else(bad)?;
            if part.is_empty() || part.len() > max_len {
                return Err(bad());
            }
            u32::from_str_radix(part, 16).map_err(|_| bad())
        };
        let lid = hex(4)? as u16;
        let qpn = hex(8)?;
        let psn = hex(8)?;
        let gid_hex = it.next().ok_or_else(bad)?;
        if it.next().is_some() || gid_hex.len() != 32 {
            return Err(bad());
        }
        let mut gid = [0u8; 16];
        for (i, byte) in gid.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&gid_hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(QpEndpoint {
            lid,
            qpn,
            psn,
            gid: Gid(gid),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_gid_round_trips_address() {
        let a = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 40123);
        assert_eq!(Gid::soft(a).soft_addr(), Some(a));
        assert_eq!(Gid([0xfe; 16]).soft_addr(), None);
    }

    #[test]
    fn endpoint_round_trips_bytes_and_text() {
        let ep = QpEndpoint {
            lid: 7,
            qpn: 0x123456,
            psn: 0xabcdef,
            gid: Gid::soft(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9)),
        };
        assert_eq!(QpEndpoint::from_bytes(&ep.to_bytes()).unwrap(), ep);
        assert_eq!(ep.to_string().parse::<QpEndpoint>().unwrap(), ep);
        assert!("1:2:3".parse::<QpEndpoint>().is_err());
        assert!(QpEndpoint::from_bytes(&[0; 3]).is_err());
    }
}
