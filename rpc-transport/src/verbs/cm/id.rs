//! An owned `rdma_cm_id`, the private data of a connect request, socket addresses.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::ptr::NonNull;

use super::super::ffi;

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH` (`#define`s the bindings omit):
/// librdmacm replaces them with the device's own maximum.
pub(super) const MAX_RD_ATOMIC: u8 = 0xff;

/// A cm_id this crate created or was handed by a connect request; destroyed on drop,
/// which tears its connection down.
pub(crate) struct CmId(NonNull<ffi::rdma_cm_id>);

// SAFETY: librdmacm's calls on one id may be made from any thread; this type only
// destroys it, once.
unsafe impl Send for CmId {}
// SAFETY: no method takes `&self` for anything but reading the pointer.
unsafe impl Sync for CmId {}

impl CmId {
    /// Takes ownership of `id` (`None` for a null pointer).
    pub(super) fn own(id: *mut ffi::rdma_cm_id) -> Option<CmId> {
        NonNull::new(id).map(CmId)
    }

    pub(super) fn raw(&self) -> *mut ffi::rdma_cm_id {
        self.0.as_ptr()
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once. librdmacm waits here until every event of the
        // id that was handed out is acknowledged; the listener thread acknowledges each
        // at once and never waits on anything a dropper holds.
        let ret = unsafe { ffi::rdma_destroy_id(self.raw()) };
        if ret != 0 {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "rdma_destroy_id failed"
            );
        }
    }
}

/// What the active side says in its connect request: which QP of the listening
/// device it wants (`to`) and which QP it is (`from`), so the listener accepts only
/// the peer the handshake named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Private {
    pub(crate) to: u32,
    pub(crate) from: u32,
}

impl Private {
    const MAGIC: [u8; 4] = *b"RRCM";
    pub(crate) const LEN: usize = 12;

    pub(crate) fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&Self::MAGIC);
        b[4..8].copy_from_slice(&self.to.to_be_bytes());
        b[8..].copy_from_slice(&self.from.to_be_bytes());
        b
    }

    /// `None` for private data this crate did not write. The transport may pad it
    /// (IB CM does, to 56 bytes), so trailing bytes are ignored.
    pub(crate) fn parse(b: &[u8]) -> Option<Private> {
        if b.len() < Self::LEN || b[..4] != Self::MAGIC {
            return None;
        }
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(Private {
            to: word(4),
            from: word(8),
        })
    }
}

/// `addr` as a `sockaddr_in`.
pub(super) fn sockaddr_in(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// The address a peer's endpoint names: `gid` IPv4-mapped, `lid` the port.
pub(crate) fn endpoint_addr(ep: &crate::QpEndpoint) -> Option<SocketAddrV4> {
    let g = ep.gid.0;
    let mapped = g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff;
    (mapped && ep.lid != 0)
        .then(|| SocketAddrV4::new(Ipv4Addr::new(g[12], g[13], g[14], g[15]), ep.lid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Gid;
    use crate::QpEndpoint;

    #[test]
    fn private_data_round_trips_and_strangers_are_refused() {
        let p = Private {
            to: 0x0001_0203,
            from: 0xfeed_beef,
        };
        let b = p.to_bytes();
        assert_eq!(Private::parse(&b), Some(p));
        let mut padded = b.to_vec();
        padded.resize(56, 0);
        assert_eq!(Private::parse(&padded), Some(p), "padding is ignored");
        assert_eq!(Private::parse(&b[..11]), None, "too short");
        let mut other = b;
        other[0] = b'X';
        assert_eq!(Private::parse(&other), None, "another magic");
        assert_eq!(Private::parse(&[]), None);
    }

    #[test]
    fn endpoints_name_an_ipv4_address_and_port() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[198, 51, 100, 1]);
        let ep = QpEndpoint {
            lid: 4791,
            qpn: 7,
            psn: 0,
            gid: Gid(gid),
        };
        assert_eq!(
            endpoint_addr(&ep),
            Some(SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 1), 4791))
        );
        assert_eq!(endpoint_addr(&QpEndpoint { lid: 0, ..ep }), None, "no port");
        let mac_gid = QpEndpoint {
            gid: Gid([0x52, 0x54, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            ..ep
        };
        assert_eq!(endpoint_addr(&mac_gid), None, "a GID that is no address");
        let sa = sockaddr_in(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 0x1234));
        assert_eq!(sa.sin_port, 0x1234u16.to_be());
        assert_eq!(sa.sin_addr.s_addr, u32::from_ne_bytes([10, 0, 0, 1]));
    }
}
