//! The soft provider's RDMA address must be the connection's own peer.
//!
//! A soft device's GID is the socket address it listens on, and connecting a QP to
//! a GID dials that address (RC over TCP; UD sends its datagrams there). A hello
//! that names any address would make the server open connections or send datagrams
//! wherever a stranger points it. So a server on the soft provider accepts only a
//! GID on the IP address the hello came from. Verbs devices are not checked: a
//! RoCE port's GID may be another interface of the same peer, and a NIC answers
//! only the queue pairs that address it.

use std::net::{IpAddr, Ipv4Addr};

use rpc_transport::Gid;

use super::Reject;

/// `Ok` when a soft GID `gid` names the host `peer` (the handshake connection's
/// remote address; `local` is its local one). Besides the peer's own address, a
/// peer on this host may name this host's loopback or unspecified address (both
/// dial this host): a loopback peer the unspecified one, and a peer that reached
/// this host on one of its other addresses (the connection's two ends are equal)
/// either.
pub fn check_soft_peer(gid: &Gid, peer: IpAddr, local: IpAddr) -> Result<(), Reject> {
    let Some(named) = gid.soft_addr() else {
        return Err(Reject::ForeignAddress);
    };
    let (peer, local) = (v4(peer), v4(local));
    let named = *named.ip();
    let this_host_by_other_address = peer == local && !peer.is_loopback();
    let ok = named == peer
        || (named.is_unspecified() && (peer.is_loopback() || this_host_by_other_address))
        || (named.is_loopback() && this_host_by_other_address);
    if ok {
        Ok(())
    } else {
        Err(Reject::ForeignAddress)
    }
}

/// The soft provider's view of an address (it speaks IPv4; any other IPv6 address
/// matches nothing it names).
fn v4(ip: IpAddr) -> Ipv4Addr {
    match ip {
        IpAddr::V4(ip) => ip,
        IpAddr::V6(ip) => ip.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv6Addr, SocketAddrV4};

    use super::*;

    fn gid(ip: [u8; 4]) -> Gid {
        Gid::soft(SocketAddrV4::new(Ipv4Addr::from(ip), 7471))
    }

    /// The check for a connection that arrived at 10.1.0.1 (a remote peer's view).
    fn check(gid: &Gid, peer: IpAddr) -> Result<(), Reject> {
        check_soft_peer(gid, peer, IpAddr::from([10, 1, 0, 1]))
    }

    #[test]
    fn the_peers_own_address_passes() {
        let peer = IpAddr::from([10, 1, 2, 3]);
        assert_eq!(check(&gid([10, 1, 2, 3]), peer), Ok(()));
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 1, 2, 3).to_ipv6_mapped());
        assert_eq!(check(&gid([10, 1, 2, 3]), mapped), Ok(()));
    }

    #[test]
    fn another_address_is_refused() {
        let peer = IpAddr::from([127, 0, 0, 1]);
        assert_eq!(
            check(&gid([10, 9, 9, 9]), peer),
            Err(Reject::ForeignAddress)
        );
        assert_eq!(
            check(&gid([127, 0, 0, 2]), peer),
            Err(Reject::ForeignAddress)
        );
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(check(&gid([10, 9, 9, 9]), v6), Err(Reject::ForeignAddress));
    }

    #[test]
    fn this_hosts_own_addresses_pass_only_from_this_host() {
        for own in [gid([0, 0, 0, 0]), gid([127, 0, 0, 1])] {
            assert_eq!(check(&own, IpAddr::from([127, 0, 0, 1])), Ok(()));
            // From this host to its own 10.1.0.1: the connection's ends are equal.
            assert_eq!(check(&own, IpAddr::from([10, 1, 0, 1])), Ok(()));
            assert_eq!(
                check(&own, IpAddr::from([10, 1, 2, 3])),
                Err(Reject::ForeignAddress)
            );
        }
    }

    #[test]
    fn a_gid_that_is_not_a_soft_address_is_refused() {
        let roce = Gid(Ipv6Addr::new(0xfe80, 0, 0, 0, 1, 2, 3, 4).octets());
        assert_eq!(
            check(&roce, IpAddr::from([127, 0, 0, 1])),
            Err(Reject::ForeignAddress)
        );
    }
}
