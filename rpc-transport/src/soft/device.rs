//! The soft device: its sockets, key table, QP table, events, counters and helper.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::addr::Gid;
use crate::device::{DeviceAttr, PortAttr};
use crate::error::{Error, Result};
use crate::event::AsyncEvent;
use crate::qp_state::Mtu;

use super::compact;
use super::cq::Cq;
use super::events::EventQueue;
use super::helper::{self, Parked};
use super::keys::KeyTable;
use super::pd::Pd;
use super::qp::Qp;
use super::shm::Listener;
use super::ud::UdShared;
use super::{SoftConfig, SoftLink, SoftProfile, SoftStats, UdFaults, DEVICE_NAME};

/// Largest number of SGEs per WR.
pub(crate) const MAX_SGE: usize = 16;
/// Largest inline payload.
pub(crate) const MAX_INLINE: u32 = 1024;
/// Largest queue depth.
pub(crate) const MAX_WR: u32 = 16 * 1024;
/// Largest CQ.
pub(crate) const MAX_CQE: u32 = 1 << 20;

/// Identities of CQs and SRQs are unique per process, so events never alias.
static NEXT_OBJECT: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_object_id() -> u64 {
    NEXT_OBJECT.fetch_add(1, Ordering::Relaxed)
}

/// Counters, updated with relaxed atomics on the paths they count.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) ud_sent: AtomicU64,
    pub(crate) ud_received: AtomicU64,
    pub(crate) ud_dropped_no_recv: AtomicU64,
    pub(crate) ud_dropped_malformed: AtomicU64,
    pub(crate) ud_dropped_qkey: AtomicU64,
    pub(crate) ud_dropped_injected: AtomicU64,
    pub(crate) ud_dropped_no_qp: AtomicU64,
    pub(crate) ud_duplicated: AtomicU64,
    pub(crate) rc_frames_malformed: AtomicU64,
    pub(crate) rc_connections: AtomicU64,
    pub(crate) rc_shm_links: AtomicU64,
    pub(crate) rc_shm_doorbells: AtomicU64,
    pub(crate) rc_direct_links: AtomicU64,
    pub(crate) rc_direct_refused: AtomicU64,
    pub(crate) rc_read_bytes_placed: AtomicU64,
    pub(crate) rc_read_bytes_placed_by_peer: AtomicU64,
    pub(crate) rc_lent_bytes_taken: AtomicU64,
    pub(crate) rc_loans_refused: AtomicU64,
    pub(crate) rc_rnr_naks: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// An opened soft device: one "NIC" with its own address.
pub(crate) struct Device {
    pub(crate) gid: Gid,
    pub(crate) ud_mtu: u32,
    pub(crate) listener: TcpListener,
    pub(crate) udp: UdpSocket,
    pub(crate) keys: KeyTable,
    pub(crate) qps: RwLock<HashMap<u32, Weak<Qp>>>,
    pub(crate) cqs: Mutex<Vec<Weak<Cq>>>,
    pub(crate) events: EventQueue,
    pub(crate) stats: Stats,
    pub(crate) ud: UdShared,
    pub(crate) parked: Mutex<Vec<Parked>>,
    /// CQs whose epoll sets watch `udp` (bounded: see `cq::MAX_UD_WATCHERS`).
    pub(crate) ud_watchers: AtomicU32,
    pub(crate) helper: Arc<helper::Shared>,
    pub(crate) profile: SoftProfile,
    /// Where shared-memory handshakes arrive (`None`: this device keeps to TCP).
    pub(crate) shm: Option<Listener>,
    /// Read responses on shared-memory links are placed into the requester with one
    /// copy where the kernel allows it (`shm::direct`), and this device's Reads offer
    /// their destination for that.
    pub(crate) direct: bool,
    /// The `ib` profile's LID (0 on the others, as on RoCE).
    lid: u16,
    /// [`monotonic_ns`] when the device opened.
    epoch_ns: u64,
    next_qpn: AtomicU32,
    next_pd: AtomicU32,
}

/// `CLOCK_MONOTONIC` (`Instant`'s clock) in nanoseconds, read directly: a post and
/// a poll each read it, and `Instant::elapsed` adds a checked subtraction of two
/// timespecs and a 128-bit multiplication (a third of the read's instructions).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Binds a TCP listener and a UDP socket on the same address and port.
fn bind_pair(cfg: &SoftConfig) -> std::io::Result<(TcpListener, UdpSocket)> {
    let mut last = None;
    // With port 0 the kernel picks a TCP port that may be taken for UDP: try again.
    for _ in 0..if cfg.port == 0 { 64 } else { 1 } {
        let tcp = TcpListener::bind(SocketAddrV4::new(cfg.bind, cfg.port))?;
        let port = tcp.local_addr()?.port();
        match UdpSocket::bind(SocketAddrV4::new(cfg.bind, port)) {
            Ok(udp) => return Ok((tcp, udp)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no port free for both TCP and UDP")))
}

impl Device {
    pub(crate) fn open(config: SoftConfig, profile: SoftProfile) -> Result<Arc<Device>> {
        let verb = |e| Error::verb("ibv_open_device", e);
        if config.bind.is_multicast() || config.bind.is_broadcast() {
            // The address becomes the GID peers connect to: it must name this host
            // (or, unspecified, every address of it: see `Device::source_via`).
            return Err(Error::InvalidArgument(format!(
                "soft devices bind a unicast or the unspecified address, not {}",
                config.bind
            )));
        }
        if config.ud_mtu < 256 || config.ud_mtu > 65_000 {
            return Err(Error::InvalidArgument(format!(
                "ud_mtu {} outside 256..=65000",
                config.ud_mtu
            )));
        }
        let link = config.link.with_env()?;
        let (listener, udp) = bind_pair(&config).map_err(verb)?;
        // Without a listener (the abstract namespace refused it) the device keeps to TCP.
        let shm = match link {
            SoftLink::Auto | SoftLink::Rings => Listener::open()
                .inspect_err(|e| tracing::debug!(error = %e, "soft device keeps to TCP"))
                .ok(),
            SoftLink::Tcp => None,
        };
        listener.set_nonblocking(true).map_err(verb)?;
        udp.set_nonblocking(true).map_err(verb)?;
        let addr = match listener.local_addr().map_err(verb)? {
            SocketAddr::V4(a) => a,
            SocketAddr::V6(_) => return Err(Error::InvalidArgument("IPv4 only".into())),
        };
        let shared = Arc::new(helper::Shared::new().map_err(verb)?);
        let lid = if profile.infiniband() {
            super::lid::assign(addr)?
        } else {
            0
        };
        let dev = Arc::new(Device {
            gid: Gid::soft(addr),
            ud_mtu: config.ud_mtu,
            listener,
            udp,
            keys: KeyTable::default(),
            qps: RwLock::new(HashMap::new()),
            cqs: Mutex::new(Vec::new()),
            events: EventQueue::new().map_err(verb)?,
            stats: Stats::default(),
            ud: UdShared::new(config.ud_faults),
            parked: Mutex::new(Vec::new()),
            ud_watchers: AtomicU32::new(0),
            helper: shared.clone(),
            profile,
            direct: link == SoftLink::Auto && shm.is_some(),
            shm,
            lid,
            epoch_ns: monotonic_ns(),
            // QPN 0 and 1 are special in verbs; start above them.
            next_qpn: AtomicU32::new(0x11),
            next_pd: AtomicU32::new(1),
        });
        helper::spawn(&dev, shared).map_err(verb)?;
        compact::register(Arc::downgrade(&dev));
        Ok(dev)
    }

    pub(crate) fn name(&self) -> &str {
        DEVICE_NAME
    }

    pub(crate) fn attr(&self) -> DeviceAttr {
        DeviceAttr {
            max_mr_size: 1 << 40,
            max_qp: 1 << 20,
            max_qp_wr: MAX_WR,
            max_sge: MAX_SGE as u32,
            max_cq: 1 << 16,
            max_cqe: MAX_CQE,
            max_mr: 1 << 20,
            max_srq: 1 << 16,
            max_srq_wr: MAX_WR,
            max_qp_rd_atom: 16,
            atomics: self.profile.atomics(),
            mw_type2: self.profile.memory_windows(),
        }
    }

    pub(crate) fn port_attr(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(Error::InvalidArgument(format!(
                "port {port} does not exist"
            )));
        }
        Ok(PortAttr {
            active: true,
            active_mtu: Mtu::Mtu4096,
            max_mtu: Mtu::Mtu4096,
            lid: self.lid,
            gid_tbl_len: 1,
        })
    }

    pub(crate) fn gid(&self, port: u8, index: u8) -> Result<Gid> {
        self.port_attr(port)?;
        if index != 0 {
            return Err(Error::InvalidArgument(format!(
                "GID index {index} out of range"
            )));
        }
        Ok(self.gid)
    }

    pub(crate) fn preferred_gid_index(&self) -> u8 {
        0
    }

    pub(crate) fn alloc_pd(self: &Arc<Self>) -> Result<Arc<Pd>> {
        Ok(Arc::new(Pd {
            dev: self.clone(),
            id: self.next_pd.fetch_add(1, Ordering::Relaxed),
        }))
    }

    pub(crate) fn create_cq(self: &Arc<Self>, cqe: u32) -> Result<Arc<Cq>> {
        if cqe == 0 || cqe > MAX_CQE {
            return Err(Error::InvalidArgument(format!(
                "cqe {cqe} outside 1..={MAX_CQE}"
            )));
        }
        let cq = Arc::new(Cq::new(self.clone(), cqe).map_err(|e| Error::verb("ibv_create_cq", e))?);
        let mut cqs = self.cqs.lock().unwrap_or_else(|e| e.into_inner());
        cqs.retain(|w| w.strong_count() > 0);
        cqs.push(Arc::downgrade(&cq));
        Ok(cq)
    }

    pub(crate) fn try_async_event(&self) -> Option<AsyncEvent> {
        self.events.pop()
    }

    pub(crate) fn async_event_fd(&self) -> RawFd {
        self.events.fd()
    }

    pub(crate) fn set_ud_faults(&self, f: UdFaults) {
        self.ud.set_faults(f);
    }

    pub(crate) fn stats(&self) -> SoftStats {
        let s = &self.stats;
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SoftStats {
            ud_sent: g(&s.ud_sent),
            ud_received: g(&s.ud_received),
            ud_dropped_no_recv: g(&s.ud_dropped_no_recv),
            ud_dropped_malformed: g(&s.ud_dropped_malformed),
            ud_dropped_qkey: g(&s.ud_dropped_qkey),
            ud_dropped_injected: g(&s.ud_dropped_injected),
            ud_dropped_no_qp: g(&s.ud_dropped_no_qp),
            ud_duplicated: g(&s.ud_duplicated),
            rc_frames_malformed: g(&s.rc_frames_malformed),
            rc_connections: g(&s.rc_connections),
            rc_shm_links: g(&s.rc_shm_links),
            rc_shm_doorbells: g(&s.rc_shm_doorbells),
            rc_direct_links: g(&s.rc_direct_links),
            rc_direct_refused: g(&s.rc_direct_refused),
            rc_read_bytes_placed: g(&s.rc_read_bytes_placed),
            rc_read_bytes_placed_by_peer: g(&s.rc_read_bytes_placed_by_peer),
            rc_lent_bytes_taken: g(&s.rc_lent_bytes_taken),
            rc_loans_refused: g(&s.rc_loans_refused),
            rc_rnr_naks: g(&s.rc_rnr_naks),
            live_qps: self.qps.read().unwrap_or_else(|e| e.into_inner()).len() as u64,
            live_mrs: self.keys.live() as u64,
            held_for_peers: self.helper.held.buffers() as u64,
        }
    }

    /// Monotonic nanoseconds since the device opened (cheap stamps for "last polled").
    pub(crate) fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.epoch_ns)
    }

    pub(crate) fn alloc_qpn(&self) -> u32 {
        self.next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff
    }

    pub(crate) fn lookup_qp(&self, qpn: u32) -> Option<Arc<Qp>> {
        let qps = self.qps.read().unwrap_or_else(|e| e.into_inner());
        qps.get(&qpn).and_then(Weak::upgrade)
    }

    /// Forgets dead QPs here and in every CQ, and drops the tables' spare capacity
    /// (see `compact`).
    pub(crate) fn compact(&self) {
        self.keys.compact();
        {
            let mut qps = self.qps.write().unwrap_or_else(|e| e.into_inner());
            qps.retain(|_, w| w.strong_count() > 0);
            compact::shrink_map(&mut qps);
        }
        let cqs: Vec<_> = {
            let mut cqs = self.cqs.lock().unwrap_or_else(|e| e.into_inner());
            cqs.retain(|w| w.strong_count() > 0);
            compact::shrink_vec(&mut cqs);
            cqs.iter().filter_map(Weak::upgrade).collect()
        };
        for cq in cqs {
            cq.forget_dead_members();
        }
    }

    pub(crate) fn raise(&self, ev: AsyncEvent) {
        self.events.push(ev);
    }

    /// The GID this device goes by toward a peer that reaches it through local address
    /// `local` (the local address of the connection the QP endpoints travel over).
    /// A device bound to one address always goes by it; one bound to the unspecified
    /// address serves every address of the host and goes by `local` (an IPv6 `local`
    /// other than an IPv4-mapped one cannot name a soft device: it keeps its own).
    pub(crate) fn source_via(&self, local: IpAddr) -> Gid {
        let Some(bound) = self.gid.soft_addr() else {
            return self.gid;
        };
        let ip = match local {
            IpAddr::V4(ip) => Some(ip),
            IpAddr::V6(ip) => ip.to_ipv4_mapped(),
        };
        match ip {
            Some(ip) if bound.ip().is_unspecified() && !ip.is_unspecified() => {
                Gid::soft(SocketAddrV4::new(ip, bound.port()))
            }
            _ => self.gid,
        }
    }

    /// The GID this device goes by toward `peer` when nobody said
    /// ([`Device::source_via`]): for a device bound to the unspecified address, the
    /// address the host's route to `peer` leaves from, as a TCP connect would pick.
    pub(crate) fn source_toward(&self, peer: SocketAddrV4) -> Gid {
        let unspecified = self
            .gid
            .soft_addr()
            .is_some_and(|a| a.ip().is_unspecified());
        if !unspecified {
            return self.gid;
        }
        // Connecting a UDP socket sends nothing; it only asks the kernel for a route.
        let routed = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
            .and_then(|s| s.connect(peer).and_then(|()| s.local_addr()));
        match routed {
            Ok(local) => self.source_via(local.ip()),
            Err(_) => self.gid,
        }
    }

    pub(crate) fn listener_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.helper.stop();
        if self.lid != 0 {
            super::lid::release(self.lid);
        }
    }
}
