//! Devices: listing, opening, and what an opened device can create.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::addr::Gid;
use crate::caps::DeviceCaps;
use crate::cq::CompletionQueue;
use crate::dispatch::dispatch;
use crate::error::{Error, Result};
use crate::event::AsyncEvent;
use crate::pd::ProtectionDomain;
use crate::qp_state::Mtu;
use crate::soft::{self, SoftConfig, SoftProfile, SoftStats, UdFaults};

/// Names the device that [`Device::open_default`] (and `open_default_on`) open, by the
/// name [`Device::open`] takes (`rxe0`, `siw0`, `soft0`), whatever else is present.
pub const DEVICE_ENV: &str = "RDMA_RPC_DEVICE";

/// Which implementation of the verbs runs underneath.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// The built-in userspace provider (RC over TCP, UD over UDP).
    Soft,
    /// libibverbs, over a real NIC or the kernel's rxe/siw (feature `rdma`).
    Verbs,
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProviderKind::Soft => "soft",
            ProviderKind::Verbs => "verbs",
        })
    }
}

/// A device as listed, before it is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Name to pass to [`Device::open`].
    pub name: String,
    /// Provider that drives it.
    pub provider: ProviderKind,
}

/// Limits of an opened device (a subset of `struct ibv_device_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceAttr {
    /// Largest registrable region in bytes.
    pub max_mr_size: u64,
    /// Queue pairs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// Scatter/gather entries per WR.
    pub max_sge: u32,
    /// Completion queues.
    pub max_cq: u32,
    /// Entries per completion queue.
    pub max_cqe: u32,
    /// Memory regions.
    pub max_mr: u32,
    /// Shared receive queues.
    pub max_srq: u32,
    /// Work requests per SRQ.
    pub max_srq_wr: u32,
    /// Incoming RDMA Reads/atomics in flight per QP.
    pub max_qp_rd_atom: u32,
    /// Whether 64-bit atomics are supported.
    pub atomics: bool,
    /// Whether type-2 memory windows are supported (`IBV_DEVICE_MEM_WINDOW_TYPE_2A`
    /// or `_2B`).
    pub mw_type2: bool,
}

/// State of a port (subset of `struct ibv_port_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// Whether the port is active.
    pub active: bool,
    /// Current MTU.
    pub active_mtu: Mtu,
    /// Largest supported MTU.
    pub max_mtu: Mtu,
    /// Local identifier (0 on RoCE and soft).
    pub lid: u16,
    /// Number of GID table entries.
    pub gid_tbl_len: u32,
}

#[derive(Clone)]
pub(crate) enum DeviceImp {
    Soft(Arc<soft::Device>),
    #[cfg(feature = "rdma")]
    Verbs(Arc<crate::verbs::Device>),
}

/// An opened device (ibverbs' `ibv_context`). Cloning shares the same context.
#[derive(Clone)]
pub struct Device {
    pub(crate) imp: DeviceImp,
}

impl Device {
    /// Every device this build can open: the soft device, and with feature `rdma`
    /// every device libibverbs lists.
    pub fn list() -> Result<Vec<DeviceInfo>> {
        #[allow(unused_mut)]
        let mut out = vec![DeviceInfo {
            name: soft::DEVICE_NAME.to_string(),
            provider: ProviderKind::Soft,
        }];
        #[cfg(feature = "rdma")]
        out.extend(
            crate::verbs::Device::list()?
                .into_iter()
                .map(|name| DeviceInfo {
                    name,
                    provider: ProviderKind::Verbs,
                }),
        );
        Ok(out)
    }

    /// Opens a device by name. `soft0` opens a new soft device on 127.0.0.1 (each
    /// open is a separate soft NIC with its own address).
    pub fn open(name: &str) -> Result<Device> {
        if name == soft::DEVICE_NAME {
            return Device::open_soft(SoftConfig::default());
        }
        #[cfg(feature = "rdma")]
        {
            crate::fd_limit::raise_once();
            return Ok(Device {
                imp: DeviceImp::Verbs(crate::verbs::Device::open(name)?),
            }
            .log_caps());
        }
        #[allow(unreachable_code)]
        Err(Error::NoDevice(name.to_string()))
    }

    /// The verbs provider's first device when the `rdma` feature is built and a
    /// device is present, else a soft device on 127.0.0.1; the device named by
    /// [`DEVICE_ENV`] instead when that is set.
    pub fn open_default() -> Result<Device> {
        Device::open_default_on(Ipv4Addr::LOCALHOST.into())
    }

    /// [`Device::open_default`] for a program whose RDMA peers reach it at `addr`
    /// (unless [`DEVICE_ENV`] names the device):
    /// the soft device binds `addr` (a server's listening address, a client's end of
    /// its route to the server), so that it is reachable wherever that address is.
    /// The unspecified address (`0.0.0.0` or `::`) serves every address of the host;
    /// QPs then name themselves by the address a connection arrived on
    /// ([`crate::QueuePair::endpoint_via`]). The soft provider speaks IPv4 only: an
    /// IPv4-mapped address counts as its IPv4 one, any other IPv6 one as 127.0.0.1.
    pub fn open_default_on(addr: IpAddr) -> Result<Device> {
        if let Some(name) = std::env::var(DEVICE_ENV).ok().filter(|n| !n.is_empty()) {
            let dev = Device::open(&name)?;
            tracing::info!(device = %name, env = DEVICE_ENV, "opened RDMA device");
            return Ok(dev);
        }
        #[cfg(feature = "rdma")]
        if let Some(name) = crate::verbs::Device::list()
            .ok()
            .and_then(|l| l.into_iter().next())
        {
            let dev = Device::open(&name)?;
            tracing::info!(provider = "verbs", device = %name, "opened RDMA device");
            return Ok(dev);
        }
        let bind = match addr {
            IpAddr::V4(ip) => ip,
            IpAddr::V6(ip) if ip.is_unspecified() => Ipv4Addr::UNSPECIFIED,
            IpAddr::V6(ip) => ip.to_ipv4_mapped().unwrap_or(Ipv4Addr::LOCALHOST),
        };
        let dev = Device::open_soft(SoftConfig {
            bind,
            ..SoftConfig::default()
        })?;
        tracing::info!(provider = "soft", device = dev.name(), %bind, "opened RDMA device");
        Ok(dev)
    }

    /// Opens a soft device with explicit settings (address, port, UD fault injection),
    /// under the profile [`crate::SOFT_PROFILE_ENV`] names (`full` when unset).
    pub fn open_soft(config: SoftConfig) -> Result<Device> {
        Device::open_soft_with(config, SoftProfile::from_env()?)
    }

    /// Opens a soft device that offers only what `profile` offers, whatever the
    /// environment says.
    pub fn open_soft_with(config: SoftConfig, profile: SoftProfile) -> Result<Device> {
        crate::fd_limit::raise_once();
        Ok(Device {
            imp: DeviceImp::Soft(soft::Device::open(config, profile)?),
        }
        .log_caps())
    }

    fn log_caps(self) -> Device {
        tracing::info!(device = self.name(), caps = %self.caps(), "RDMA device capabilities");
        self
    }

    /// What the device can do (detected when it was opened).
    pub fn caps(&self) -> DeviceCaps {
        dispatch!(&self.imp, DeviceImp, d => d.caps())
    }

    /// Which provider drives this device.
    pub fn provider(&self) -> ProviderKind {
        match self.imp {
            DeviceImp::Soft(_) => ProviderKind::Soft,
            #[cfg(feature = "rdma")]
            DeviceImp::Verbs(_) => ProviderKind::Verbs,
        }
    }

    /// Device name.
    pub fn name(&self) -> &str {
        dispatch!(&self.imp, DeviceImp, d => d.name())
    }

    /// Device limits.
    pub fn attr(&self) -> DeviceAttr {
        dispatch!(&self.imp, DeviceImp, d => d.attr())
    }

    /// State of port `port` (1-based).
    pub fn port_attr(&self, port: u8) -> Result<PortAttr> {
        dispatch!(&self.imp, DeviceImp, d => d.port_attr(port))
    }

    /// GID table entry `index` of port `port`.
    pub fn gid(&self, port: u8, index: u8) -> Result<Gid> {
        dispatch!(&self.imp, DeviceImp, d => d.gid(port, index))
    }

    /// The GID index to use for RoCE v2 / soft traffic on port 1 (soft: 0; verbs: the
    /// first IPv4-mapped entry, else 0).
    pub fn preferred_gid_index(&self) -> u8 {
        dispatch!(&self.imp, DeviceImp, d => d.preferred_gid_index())
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        let imp = dispatch!(&self.imp, DeviceImp, d => d.alloc_pd().map(|p| p.into()))?;
        Ok(ProtectionDomain::new(imp, self.clone()))
    }

    /// Creates a completion queue with room for at least `cqe` completions.
    pub fn create_cq(&self, cqe: u32) -> Result<CompletionQueue> {
        let imp = dispatch!(&self.imp, DeviceImp, d => d.create_cq(cqe).map(|c| c.into()))?;
        Ok(CompletionQueue::new(imp))
    }

    /// The next pending asynchronous event, if any (never blocks).
    pub fn try_async_event(&self) -> Option<AsyncEvent> {
        dispatch!(&self.imp, DeviceImp, d => d.try_async_event())
    }

    /// Waits under tokio for the next asynchronous event.
    pub async fn async_event(&self) -> Result<AsyncEvent> {
        let fd = dispatch!(&self.imp, DeviceImp, d => d.async_event_fd());
        // SAFETY: the descriptor belongs to the device context `self` holds, which
        // outlives this local registration.
        let afd = unsafe { crate::cq::register_readable(fd) }
            .map_err(|e| Error::verb("ibv_get_async_event", e))?;
        loop {
            if let Some(ev) = self.try_async_event() {
                return Ok(ev);
            }
            let mut guard = afd
                .readable()
                .await
                .map_err(|e| Error::verb("ibv_get_async_event", e))?;
            if let Some(ev) = self.try_async_event() {
                return Ok(ev);
            }
            guard.clear_ready();
        }
    }

    /// File descriptor that is readable when an asynchronous event is pending.
    pub fn async_event_fd(&self) -> RawFd {
        dispatch!(&self.imp, DeviceImp, d => d.async_event_fd())
    }

    /// Replaces the UD fault injection of a soft device (the generator restarts from
    /// `f.seed`). Other providers refuse.
    pub fn set_ud_faults(&self, f: UdFaults) -> Result<()> {
        match &self.imp {
            DeviceImp::Soft(d) => {
                d.set_ud_faults(f);
                Ok(())
            }
            #[cfg(feature = "rdma")]
            DeviceImp::Verbs(_) => Err(Error::InvalidArgument(
                "UD fault injection exists only on the soft provider".into(),
            )),
        }
    }

    /// Counters of a soft device; `None` on other providers.
    pub fn soft_stats(&self) -> Option<SoftStats> {
        match &self.imp {
            DeviceImp::Soft(d) => Some(d.stats()),
            #[cfg(feature = "rdma")]
            DeviceImp::Verbs(_) => None,
        }
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name())
            .field("provider", &self.provider())
            .finish()
    }
}
