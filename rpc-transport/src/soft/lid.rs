//! InfiniBand addressing for soft devices of the `ib` profile: each gets a LID, unique
//! on the host (one emulated subnet, whose subnet manager is a directory: one file per
//! LID, naming the device's address), and an address vector without a GRH is routed
//! by its destination LID, as an IB switch would. Address vectors with a GRH keep
//! going by their GID (RoCE, soft, and IB across subnets).

use std::fs;
use std::io::Write;
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, Ordering};

use crate::addr::Gid;
use crate::ah::AhAttr;
use crate::error::{Error, Result};

/// Unicast LIDs are 0x0001..=0xbfff (0 is reserved, 0xc000 up multicast).
const LAST_UNICAST: u16 = 0xbfff;

/// Where this process tries next (so a released LID is not reused at once).
static NEXT: AtomicU16 = AtomicU16::new(1);

fn subnet_dir() -> PathBuf {
    std::env::temp_dir().join("rdma-rpc-soft-subnet")
}

fn port_file(lid: u16) -> PathBuf {
    subnet_dir().join(format!("{lid:04x}"))
}

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::InvalidArgument(format!(
        "soft subnet ({}): {what}: {e}",
        subnet_dir().display()
    ))
}

/// A free LID for the device at `addr`, claimed by creating its file.
pub(crate) fn assign(addr: SocketAddrV4) -> Result<u16> {
    fs::create_dir_all(subnet_dir()).map_err(|e| io_err("creating the directory", e))?;
    for _ in 0..LAST_UNICAST {
        let lid = NEXT
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                Some(if l >= LAST_UNICAST { 1 } else { l + 1 })
            })
            .unwrap_or(1);
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(port_file(lid))
        {
            Ok(mut f) => {
                f.write_all(addr.to_string().as_bytes())
                    .map_err(|e| io_err("writing a LID", e))?;
                return Ok(lid);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err("claiming a LID", e)),
        }
    }
    Err(Error::InvalidArgument(
        "every unicast LID of the soft subnet is taken".into(),
    ))
}

/// The device with `lid` closed.
pub(crate) fn release(lid: u16) {
    let _ = fs::remove_file(port_file(lid));
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
    let no_port = || {
        Error::InvalidArgument(format!(
            "LID {:#x} belongs to no port of the soft subnet (no open `ib` device has it)",
            a.dlid
        ))
    };
    let text = fs::read_to_string(port_file(a.dlid)).map_err(|_| no_port())?;
    let addr: SocketAddrV4 = text.trim().parse().map_err(|_| no_port())?;
    Ok((addr, Gid::soft(addr)))
}
