//! InfiniBand addressing for soft devices of the `ib` profile: each gets a LID, unique
//! in the process (one emulated subnet, the subnet manager being this table), and an
//! address vector without a GRH is routed by its destination LID, as an IB switch
//! would. Address vectors with a GRH keep going by their GID (RoCE, soft, and IB
//! across subnets).

use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::sync::Mutex;

use crate::addr::Gid;
use crate::ah::AhAttr;
use crate::error::{Error, Result};

/// Unicast LIDs are 0x0001..=0xbfff (0 is reserved, 0xc000 up multicast).
const LAST_UNICAST: u16 = 0xbfff;

struct Subnet {
    next: u16,
    ports: BTreeMap<u16, SocketAddrV4>,
}

static SUBNET: Mutex<Subnet> = Mutex::new(Subnet {
    next: 1,
    ports: BTreeMap::new(),
});

fn subnet() -> std::sync::MutexGuard<'static, Subnet> {
    SUBNET.lock().unwrap_or_else(|p| p.into_inner())
}

/// A LID for the device at `addr`, the lowest free one from where the last
/// assignment left off (so a closed device's LID is not reused at once).
pub(crate) fn assign(addr: SocketAddrV4) -> Result<u16> {
    let mut s = subnet();
    for _ in 0..LAST_UNICAST {
        let lid = s.next;
        s.next = if lid == LAST_UNICAST { 1 } else { lid + 1 };
        if let std::collections::btree_map::Entry::Vacant(v) = s.ports.entry(lid) {
            v.insert(addr);
            return Ok(lid);
        }
    }
    Err(Error::InvalidArgument(
        "every unicast LID of the soft subnet is taken".into(),
    ))
}

/// The device with `lid` closed.
pub(crate) fn release(lid: u16) {
    subnet().ports.remove(&lid);
}

/// Where an address vector leads: by its GRH's GID if it has one, else by its LID.
pub(crate) fn route(a: &AhAttr) -> Result<(SocketAddrV4, Gid)> {
    if let Some(grh) = a.grh {
        let addr = grh.dgid.soft_addr().ok_or_else(|| {
            Error::InvalidArgument(format!("GID {} is not a soft device's", grh.dgid))
        })?;
        return Ok((addr, grh.dgid));
    }
    if a.dlid == 0 {
        return Err(Error::InvalidArgument(
            "a soft address vector needs a GRH with the destination GID, or the LID of \
             an `ib` profile soft device"
                .into(),
        ));
    }
    let addr = subnet().ports.get(&a.dlid).copied().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "LID {:#x} belongs to no port of the soft subnet (no open `ib` device has it)",
            a.dlid
        ))
    })?;
    Ok((addr, Gid::soft(addr)))
}
