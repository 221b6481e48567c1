//! One "host": an opened device of the provider under test and a protection domain.
//!
//! The provider is chosen by `RDMA_RPC_TEST_DEVICE` (default `soft0`); a soft device
//! takes the profile `RDMA_RPC_SOFT_PROFILE` names (`full`, `iwarp_like`, `rc_only`). For `soft0`
//! each host is an independent soft device; for a verbs device (e.g. `rxe0`) each host
//! opens the same device again, as two processes on one machine would.

use std::io::Write as _;
use std::sync::Once;

use rpc_transport::{
    AccessFlags, CompletionQueue, Device, MemoryRegion, ProtectionDomain, SoftConfig,
};

/// Environment variable naming the device under test.
pub const DEVICE_ENV: &str = "RDMA_RPC_TEST_DEVICE";

/// The device name under test.
pub fn device_name() -> String {
    std::env::var(DEVICE_ENV).unwrap_or_else(|_| "soft0".to_string())
}

/// An opened device and a protection domain on it.
pub struct Host {
    pub dev: Device,
    pub pd: ProtectionDomain,
}

impl Host {
    /// Opens the device under test, failing the test loudly if it cannot: a suite that
    /// skips when the device is missing would pass on a machine that tests nothing.
    pub fn open() -> Host {
        let name = device_name();
        let dev = if name == "soft0" {
            Device::open_soft(SoftConfig::default())
        } else {
            Device::open(&name)
        }
        .unwrap_or_else(|e| panic!("cannot open device {name:?} (from ${DEVICE_ENV}): {e}"));
        announce(&dev);
        let pd = dev.alloc_pd().expect("ibv_alloc_pd");
        Host { dev, pd }
    }

    /// A zeroed memory region of `len` bytes.
    pub fn mr(&self, len: usize, access: AccessFlags) -> MemoryRegion {
        self.pd.alloc_mr(len, access).expect("ibv_reg_mr")
    }

    /// A memory region every local and remote operation may use.
    pub fn mr_all(&self, len: usize) -> MemoryRegion {
        self.mr(len, AccessFlags::all())
    }

    /// A completion queue with room for at least `cqe` completions.
    pub fn cq(&self, cqe: u32) -> CompletionQueue {
        self.dev.create_cq(cqe).expect("ibv_create_cq")
    }

    /// The UD payload limit: the port's active MTU.
    pub fn mtu(&self) -> usize {
        let port = self.dev.port_attr(1).expect("ibv_query_port");
        port.active_mtu.bytes() as usize
    }
}

/// Says once per test binary which provider is under test. Written to the process's
/// stderr directly, past libtest's output capture, so it shows in every run.
fn announce(dev: &Device) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "conformance: provider {} (device {}, from ${DEVICE_ENV}={}; {} {:?}; {} {:?}): {}",
            dev.provider(),
            dev.name(),
            device_name(),
            rpc_transport::SOFT_PROFILE_ENV,
            std::env::var(rpc_transport::SOFT_PROFILE_ENV).unwrap_or_default(),
            rpc_transport::SOFT_LINK_ENV,
            std::env::var(rpc_transport::SOFT_LINK_ENV).unwrap_or_default(),
            dev.caps()
        );
    });
}
