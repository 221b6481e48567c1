//! Opened devices (`ibv_context`): listing, limits, ports, GIDs, async events.

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::cm::{self, Listener};
use super::error::{check, last_error, set_nonblocking};
use super::event::read_async_event;
use super::ffi;
use super::{Cq, Pd};
use crate::addr::Gid;
use crate::caps::{DeviceCaps, Fabric};
use crate::device::{DeviceAttr, PortAttr};
use crate::error::{Error, Result};
use crate::event::AsyncEvent;
use crate::qp_state::Mtu;

/// An opened verbs device. Closed on drop, after every PD and CQ (which hold an `Arc`
/// to it) is gone.
pub(crate) struct Device {
    ctx: NonNull<ffi::ibv_context>,
    name: String,
    attr: DeviceAttr,
    /// `preferred_gid_index() + 1` once an IPv4-mapped GID was found (0 = not yet).
    /// Only a hit is cached: rxe fills its GID table asynchronously after the link is
    /// added, so an early miss must not stick.
    mapped_gid: AtomicU16,
    /// Detected right after opening (probing needs the `Arc`).
    caps: OnceLock<DeviceCaps>,
    /// iWARP: the rdma_cm listener, started by the first endpoint a QP publishes.
    cm: Mutex<Option<Arc<Listener>>>,
}

// SAFETY: libibverbs contexts may be used from any thread; the fields besides the
// pointer are immutable or atomic.
unsafe impl Send for Device {}
// SAFETY: as above; every verb called through `&Device` is thread-safe in libibverbs.
unsafe impl Sync for Device {}

/// The device list of `ibv_get_device_list`, freed on drop.
struct DeviceList {
    list: NonNull<*mut ffi::ibv_device>,
    len: usize,
}

impl DeviceList {
    /// `Ok(None)` when the kernel has no RDMA support at all (`ENOSYS`): that is "no
    /// devices", not a failure.
    fn get() -> Result<Option<DeviceList>> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer for the count.
        let raw = unsafe { ffi::ibv_get_device_list(&mut n) };
        match NonNull::new(raw) {
            Some(list) => Ok(Some(DeviceList {
                list,
                len: usize::try_from(n).unwrap_or(0),
            })),
            None => {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::ENOSYS) {
                    Ok(None)
                } else {
                    Err(Error::verb("ibv_get_device_list", err))
                }
            }
        }
    }

    fn devices(&self) -> impl Iterator<Item = *mut ffi::ibv_device> + '_ {
        // SAFETY: the list holds `len` valid device pointers while `self` lives.
        (0..self.len).map(|i| unsafe { *self.list.as_ptr().add(i) })
    }

    fn name(dev: *mut ffi::ibv_device) -> String {
        // SAFETY: `dev` comes from a live device list; the name is a NUL-terminated
        // string inside the device struct.
        unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned()
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once; opened
        // contexts stay valid after the list is freed (documented by libibverbs).
        unsafe { ffi::ibv_free_device_list(self.list.as_ptr()) }
    }
}

impl Device {
    /// Names of all devices libibverbs finds (empty on a kernel without RDMA).
    pub(crate) fn list() -> Result<Vec<String>> {
        Ok(match DeviceList::get()? {
            Some(list) => list.devices().map(DeviceList::name).collect(),
            None => Vec::new(),
        })
    }

    /// Opens the device called `name`.
    pub(crate) fn open(name: &str) -> Result<Arc<Device>> {
        let list = DeviceList::get()?.ok_or_else(|| Error::NoDevice(name.to_string()))?;
        let dev = list
            .devices()
            .find(|&d| DeviceList::name(d) == name)
            .ok_or_else(|| Error::NoDevice(name.to_string()))?;
        // SAFETY: `dev` is a device of the live list.
        let ctx = NonNull::new(unsafe { ffi::ibv_open_device(dev) })
            .ok_or_else(|| last_error("ibv_open_device"))?;
        // Own the context at once so that any error below closes it.
        let mut device = Device {
            ctx,
            name: name.to_string(),
            attr: DeviceAttr::default(),
            mapped_gid: AtomicU16::new(0),
            caps: OnceLock::new(),
            cm: Mutex::new(None),
        };
        device.attr = device.query_attr()?;
        set_nonblocking("ibv_get_async_event", device.async_event_fd())?;
        let device = Arc::new(device);
        let caps = super::caps::detect(&device)?;
        device.caps.get_or_init(|| caps);
        Ok(device)
    }

    pub(super) fn ctx(&self) -> *mut ffi::ibv_context {
        self.ctx.as_ptr()
    }

    fn query_attr(&self) -> Result<DeviceAttr> {
        let mut a = MaybeUninit::<ffi::ibv_device_attr>::zeroed();
        // SAFETY: live context; `a` is a writable ibv_device_attr.
        check("ibv_query_device", unsafe {
            ffi::ibv_query_device(self.ctx(), a.as_mut_ptr())
        })?;
        // SAFETY: zero-initialised plain data, filled in by the verb.
        let a = unsafe { a.assume_init() };
        let u = |v: c_int| u32::try_from(v).unwrap_or(0);
        Ok(DeviceAttr {
            max_mr_size: a.max_mr_size,
            max_qp: u(a.max_qp),
            max_qp_wr: u(a.max_qp_wr),
            max_sge: u(a.max_sge),
            max_cq: u(a.max_cq),
            max_cqe: u(a.max_cqe),
            max_mr: u(a.max_mr),
            max_srq: u(a.max_srq),
            max_srq_wr: u(a.max_srq_wr),
            max_qp_rd_atom: u(a.max_qp_rd_atom),
            atomics: a.atomic_cap != ffi::ibv_atomic_cap::IBV_ATOMIC_NONE,
            mw_type2: {
                use ffi::ibv_device_cap_flags as F;
                let flags = F(a.device_cap_flags);
                (flags & (F::IBV_DEVICE_MEM_WINDOW_TYPE_2A | F::IBV_DEVICE_MEM_WINDOW_TYPE_2B)).0
                    != 0
            },
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn attr(&self) -> DeviceAttr {
        self.attr
    }

    pub(crate) fn caps(&self) -> DeviceCaps {
        // Set in `open` before the device is handed out.
        *self.caps.get().expect("capabilities detected at open")
    }

    pub(crate) fn port_attr(&self, port: u8) -> Result<PortAttr> {
        let mut a = MaybeUninit::<ffi::ibv_port_attr>::zeroed();
        // SAFETY: live context; `a` is a writable ibv_port_attr of the size the
        // (versioned) query_port entry point is told.
        check("ibv_query_port", unsafe {
            ffi::___ibv_query_port(self.ctx(), port, a.as_mut_ptr())
        })?;
        // SAFETY: zero-initialised plain data, filled in by the verb.
        let a = unsafe { a.assume_init() };
        Ok(PortAttr {
            active: a.state == ffi::ibv_port_state::IBV_PORT_ACTIVE,
            active_mtu: mtu_from_raw(a.active_mtu),
            max_mtu: mtu_from_raw(a.max_mtu),
            lid: a.lid,
            gid_tbl_len: u32::try_from(a.gid_tbl_len).unwrap_or(0),
        })
    }

    pub(crate) fn gid(&self, port: u8, index: u8) -> Result<Gid> {
        let mut g = MaybeUninit::<ffi::ibv_gid>::zeroed();
        // SAFETY: live context; `g` is a writable 16-byte ibv_gid.
        check("ibv_query_gid", unsafe {
            ffi::ibv_query_gid(self.ctx(), port, c_int::from(index), g.as_mut_ptr())
        })?;
        // SAFETY: every bit pattern of the union is a valid `raw` byte array.
        Ok(Gid(unsafe { g.assume_init().raw }))
    }

    /// The first IPv4-mapped GID of port 1 (RoCE v2 over IPv4, what rxe's GID 1 is and
    /// what two hosts on an IPv4 network can route), else 0.
    pub(crate) fn preferred_gid_index(&self) -> u8 {
        match self.mapped_gid.load(Ordering::Relaxed) {
            0 => {}
            hit => return (hit - 1) as u8,
        }
        let len = self
            .port_attr(1)
            .map(|p| p.gid_tbl_len.min(256))
            .unwrap_or(0);
        for index in 0..len {
            let index = index as u8;
            if self.gid(1, index).is_ok_and(|g| is_ipv4_mapped(&g)) {
                self.mapped_gid
                    .store(u16::from(index) + 1, Ordering::Relaxed);
                return index;
            }
        }
        0
    }

    pub(crate) fn alloc_pd(self: &Arc<Self>) -> Result<Arc<Pd>> {
        Pd::alloc(self)
    }

    pub(crate) fn create_cq(self: &Arc<Self>, cqe: u32) -> Result<Arc<Cq>> {
        Cq::create(self, cqe)
    }

    /// The next asynchronous event this crate knows, skipping (and acknowledging)
    /// those it has no variant for. Never blocks: the async fd is non-blocking.
    pub(crate) fn try_async_event(&self) -> Option<AsyncEvent> {
        loop {
            // SAFETY: live context whose async fd was made non-blocking in `open`.
            match unsafe { read_async_event(self.ctx()) } {
                None => return None,
                Some(Some(ev)) => return Some(ev),
                Some(None) => continue,
            }
        }
    }

    /// Whether RC QPs of this device connect through rdma_cm (iWARP) rather than by
    /// hand.
    pub(crate) fn needs_cm(&self) -> bool {
        self.caps().fabric == Fabric::Iwarp
    }

    /// The rdma_cm listener of this device, started on first use on the IPv4 address
    /// of the device's netdev.
    pub(super) fn cm_listener(&self) -> Result<Arc<Listener>> {
        let mut g = self.cm.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = &*g {
            return Ok(l.clone());
        }
        let ip = cm::device_ipv4(&self.name, &self.gid(1, 0)?)?;
        let l = Listener::start(&self.name, ip)?;
        *g = Some(l.clone());
        Ok(l)
    }

    pub(crate) fn async_event_fd(&self) -> RawFd {
        // SAFETY: live context; `async_fd` is set at open and never changes.
        unsafe { (*self.ctx()).async_fd }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(l) = self.cm.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            l.shutdown();
        }
        // SAFETY: every child object holds an `Arc<Device>`, so none is left; the
        // context is closed once.
        let ret = unsafe { ffi::ibv_close_device(self.ctx()) };
        if ret != 0 {
            tracing::warn!(device = %self.name, ret, "ibv_close_device failed");
        }
    }
}

/// `::ffff:a.b.c.d`.
fn is_ipv4_mapped(g: &Gid) -> bool {
    g.0[..10].iter().all(|&b| b == 0) && g.0[10] == 0xff && g.0[11] == 0xff
}

/// `enum ibv_mtu` to [`Mtu`]; values outside the enum (none exist today) become the
/// smallest MTU, which every port supports.
pub(super) fn mtu_from_raw(v: ffi::ibv_mtu::Type) -> Mtu {
    match v {
        ffi::ibv_mtu::IBV_MTU_512 => Mtu::Mtu512,
        ffi::ibv_mtu::IBV_MTU_1024 => Mtu::Mtu1024,
        ffi::ibv_mtu::IBV_MTU_2048 => Mtu::Mtu2048,
        ffi::ibv_mtu::IBV_MTU_4096 => Mtu::Mtu4096,
        _ => Mtu::Mtu256,
    }
}

/// [`Mtu`] to `enum ibv_mtu` (the discriminants are ibverbs' values).
pub(super) fn mtu_to_raw(m: Mtu) -> ffi::ibv_mtu::Type {
    m as ffi::ibv_mtu::Type
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_round_trips_through_ibverbs_values() {
        for m in [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ] {
            assert_eq!(mtu_from_raw(mtu_to_raw(m)), m);
        }
        assert_eq!(mtu_to_raw(Mtu::Mtu1024), ffi::ibv_mtu::IBV_MTU_1024);
    }

    #[test]
    fn ipv4_mapped_gids_are_recognised() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[192, 0, 2, 1]);
        assert!(is_ipv4_mapped(&Gid(g)));
        let mut link_local = [0u8; 16];
        link_local[0] = 0xfe;
        link_local[1] = 0x80;
        assert!(!is_ipv4_mapped(&Gid(link_local)));
    }
}
