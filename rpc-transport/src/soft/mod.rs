//! The soft provider: a userspace RDMA device (RC over TCP, UD over UDP).
//!
//! STUB: the method signatures below are the contract the neutral layer calls; the
//! implementation is being written.

use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::access::AccessFlags;
use crate::addr::Gid;
use crate::ah::AhAttr;
use crate::device::{DeviceAttr, PortAttr};
use crate::error::Result;
use crate::event::AsyncEvent;
use crate::mr_buffer::MrBuffer;
use crate::qp::QpCap;
use crate::qp_state::{QpAttr, QpState, QpType};
use crate::srq::SrqInitAttr;
use crate::wc::WorkCompletion;
use crate::wr::{RecvWr, SendWr};

/// Name under which the soft device is listed.
pub const DEVICE_NAME: &str = "soft0";

/// Settings of a soft device.
#[derive(Debug, Clone, PartialEq)]
pub struct SoftConfig {
    /// Address the device listens on (TCP for RC, UDP for UD, same port).
    pub bind: Ipv4Addr,
    /// Port; 0 picks a free one.
    pub port: u16,
    /// UD MTU in bytes (payload limit of one datagram).
    pub ud_mtu: u32,
    /// UD fault injection, for tests of the layers above.
    pub ud_faults: UdFaults,
}

impl Default for SoftConfig {
    fn default() -> Self {
        SoftConfig {
            bind: Ipv4Addr::LOCALHOST,
            port: 0,
            ud_mtu: 4096,
            ud_faults: UdFaults::default(),
        }
    }
}

/// Probabilities (0.0..=1.0) applied to every UD datagram this device sends.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct UdFaults {
    /// Drop the datagram.
    pub loss: f64,
    /// Send it twice.
    pub duplicate: f64,
    /// Hold it back and send it after the next one.
    pub reorder: f64,
    /// Seed of the deterministic generator deciding the faults.
    pub seed: u64,
}

/// An opened soft device.
pub struct Device;
/// A soft protection domain.
pub struct Pd;
/// A soft memory registration.
pub struct Mr;
/// A soft completion queue.
pub struct Cq;
/// A soft queue pair.
pub struct Qp;
/// A soft shared receive queue.
pub struct Srq;
/// A soft address handle.
pub struct Ah;

#[allow(unused_variables, missing_docs)]
impl Device {
    pub(crate) fn open(config: SoftConfig) -> Result<Arc<Device>> {
        todo!()
    }
    pub(crate) fn name(&self) -> &str {
        todo!()
    }
    pub(crate) fn attr(&self) -> DeviceAttr {
        todo!()
    }
    pub(crate) fn port_attr(&self, port: u8) -> Result<PortAttr> {
        todo!()
    }
    pub(crate) fn gid(&self, port: u8, index: u8) -> Result<Gid> {
        todo!()
    }
    pub(crate) fn preferred_gid_index(&self) -> u8 {
        0
    }
    pub(crate) fn alloc_pd(self: &Arc<Self>) -> Result<Arc<Pd>> {
        todo!()
    }
    pub(crate) fn create_cq(self: &Arc<Self>, cqe: u32) -> Result<Arc<Cq>> {
        todo!()
    }
    pub(crate) fn try_async_event(&self) -> Option<AsyncEvent> {
        todo!()
    }
    pub(crate) fn async_event_fd(&self) -> RawFd {
        todo!()
    }
}

#[allow(unused_variables)]
impl Pd {
    pub(crate) fn register(&self, buf: Arc<MrBuffer>, access: AccessFlags) -> Result<Mr> {
        todo!()
    }
    pub(crate) fn create_qp(
        self: &Arc<Self>,
        qp_type: QpType,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        srq: Option<&Arc<Srq>>,
        cap: &QpCap,
        sq_sig_all: bool,
    ) -> Result<Arc<Qp>> {
        todo!()
    }
    pub(crate) fn create_srq(self: &Arc<Self>, attr: &SrqInitAttr) -> Result<Arc<Srq>> {
        todo!()
    }
    pub(crate) fn create_ah(self: &Arc<Self>, attr: &AhAttr) -> Result<Arc<Ah>> {
        todo!()
    }
}

impl Mr {
    pub(crate) fn lkey(&self) -> u32 {
        todo!()
    }
    pub(crate) fn rkey(&self) -> u32 {
        todo!()
    }
}

#[allow(unused_variables)]
impl Cq {
    pub(crate) fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        todo!()
    }
    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<()> {
        todo!()
    }
    pub(crate) fn event_fd(&self) -> RawFd {
        todo!()
    }
    pub(crate) fn consume_events(&self) {
        todo!()
    }
    pub(crate) fn capacity(&self) -> u32 {
        todo!()
    }
    pub(crate) fn id(&self) -> u64 {
        todo!()
    }
}

#[allow(unused_variables)]
impl Qp {
    pub(crate) fn qp_num(&self) -> u32 {
        todo!()
    }
    pub(crate) fn state(&self) -> QpState {
        todo!()
    }
    pub(crate) fn cap(&self) -> QpCap {
        todo!()
    }
    pub(crate) fn modify(&self, to: QpState, attr: &QpAttr) -> Result<()> {
        todo!()
    }
    pub(crate) unsafe fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        todo!()
    }
    pub(crate) unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        todo!()
    }
}

#[allow(unused_variables)]
impl Srq {
    pub(crate) unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        todo!()
    }
    pub(crate) fn arm_limit(&self, limit: u32) -> Result<()> {
        todo!()
    }
    pub(crate) fn id(&self) -> u64 {
        todo!()
    }
}
