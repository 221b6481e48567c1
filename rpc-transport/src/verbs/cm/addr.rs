//! The IPv4 address of an iWARP device: rdma_cm addresses a device by an address of
//! its netdev, and an iWARP port's GID is that netdev's MAC (`siw_query_gid`; iWARP
//! RNICs do the same), so the address is the one of the interface with that MAC.

use std::ffi::CStr;
use std::net::Ipv4Addr;

use crate::addr::Gid;
use crate::error::{Error, Result};

/// One address of one interface, as `getifaddrs` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum IfAddr {
    Mac(String, [u8; 6]),
    V4(String, Ipv4Addr),
}

/// The first IPv4 address of the interface whose MAC begins `gid` (the rest zero).
pub(crate) fn device_ipv4(device: &str, gid: &Gid) -> Result<Ipv4Addr> {
    pick(&interfaces()?, gid).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{device}: no IPv4 address on the interface with MAC {:02x?} (its GID); \
             rdma_cm, which iWARP connects through, needs one",
            &gid.0[..6]
        ))
    })
}

pub(super) fn pick(addrs: &[IfAddr], gid: &Gid) -> Option<Ipv4Addr> {
    if gid.0[6..].iter().any(|&b| b != 0) || gid.0[..6].iter().all(|&b| b == 0) {
        return None;
    }
    let ifname = addrs.iter().find_map(|a| match a {
        IfAddr::Mac(n, mac) if mac[..] == gid.0[..6] => Some(n),
        _ => None,
    })?;
    addrs.iter().find_map(|a| match a {
        IfAddr::V4(n, ip) if n == ifname => Some(*ip),
        _ => None,
    })
}

fn interfaces() -> Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(Error::Verb {
            verb: "getifaddrs",
            source: std::io::Error::last_os_error(),
        });
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: a node of the live list from getifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a NUL-terminated name of the live list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: `ifa_addr` is non-null and points at a sockaddr of its family.
        match i32::from(unsafe { (*ifa.ifa_addr).sa_family }) {
            libc::AF_INET => {
                // SAFETY: AF_INET: the sockaddr is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(IfAddr::V4(
                    name,
                    Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                ));
            }
            libc::AF_PACKET => {
                // SAFETY: AF_PACKET: the sockaddr is a sockaddr_ll.
                let sll = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_ll) };
                if sll.sll_halen == 6 {
                    let mut mac = [0u8; 6];
                    mac.copy_from_slice(&sll.sll_addr[..6]);
                    out.push(IfAddr::Mac(name, mac));
                }
            }
            _ => {}
        }
    }
    // SAFETY: the list from getifaddrs above, freed once; nothing borrows it any more.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid_of(mac: [u8; 6]) -> Gid {
        let mut g = [0u8; 16];
        g[..6].copy_from_slice(&mac);
        Gid(g)
    }

    #[test]
    fn the_interface_with_the_gids_mac_gives_the_address() {
        let m1 = [0x52, 0x54, 0, 0, 0, 1];
        let m2 = [0x52, 0x54, 0, 0, 0, 2];
        let list = vec![
            IfAddr::Mac("lo".into(), [0; 6]),
            IfAddr::V4("lo".into(), Ipv4Addr::LOCALHOST),
            IfAddr::Mac("rxenet0".into(), m1),
            IfAddr::V4("rxenet0".into(), Ipv4Addr::new(192, 0, 2, 1)),
            IfAddr::Mac("siwnet0".into(), m2),
            IfAddr::V4("siwnet0".into(), Ipv4Addr::new(198, 51, 100, 1)),
        ];
        assert_eq!(
            pick(&list, &gid_of(m2)),
            Some(Ipv4Addr::new(198, 51, 100, 1))
        );
        assert_eq!(pick(&list, &gid_of(m1)), Some(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(
            pick(&list, &gid_of([1, 2, 3, 4, 5, 6])),
            None,
            "no such MAC"
        );
        assert_eq!(
            pick(&list, &gid_of([0; 6])),
            None,
            "a zero GID names nothing"
        );
        let mut roce = gid_of(m1);
        roce.0[10] = 0xff;
        assert_eq!(pick(&list, &roce), None, "not a MAC-based GID");
        let no_v4 = vec![IfAddr::Mac("x".into(), m1)];
        assert_eq!(pick(&no_v4, &gid_of(m1)), None, "interface without IPv4");
    }
}
