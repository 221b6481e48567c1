//! Protection domains: the scope of keys, and the factory of MRs, QPs, SRQs and AHs.

use std::sync::Arc;

use crate::access::AccessFlags;
use crate::ah::{AddressHandle, AhAttr, AhImp};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::mr::{MemoryRegion, MrImp};
use crate::mr_buffer::MrBuffer;
use crate::mw::{MemoryWindow, MwImp};
use crate::qp::{create_qp, QpInitAttr, QueuePair};
use crate::soft;
use crate::srq::{SharedReceiveQueue, SrqImp, SrqInitAttr};

#[derive(Clone)]
pub(crate) enum PdImp {
    Soft(Arc<soft::Pd>),
    #[cfg(feature = "rdma")]
    Verbs(Arc<crate::verbs::Pd>),
}

/// A protection domain (`ibv_pd`). Objects created from it keep it alive; cloning
/// shares the same domain.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) imp: PdImp,
    device: Device,
}

impl ProtectionDomain {
    pub(crate) fn new(imp: PdImp, device: Device) -> Self {
        ProtectionDomain { imp, device }
    }

    /// The device it belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Allocates `len` zeroed, page-aligned bytes and registers them with `access`.
    pub fn alloc_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        self.alloc(MrBuffer::zeroed(len), access)
    }

    /// As [`ProtectionDomain::alloc_mr`], for memory that holds whole message bodies
    /// (copied end to end, by the CPU or by a peer's Read): from 2 MiB on it starts on
    /// a huge-page boundary and asks the kernel for transparent huge pages, which
    /// make pinning and copying it cheaper. Not for memory used a slot at a time (a
    /// huge page makes 2 MiB resident at its first touch).
    pub fn alloc_bulk_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        self.alloc(MrBuffer::zeroed_bulk(len), access)
    }

    /// Registers the application's `bytes` where they lie, for peers to RDMA Read
    /// (REMOTE_READ, nothing else: `Bytes` are immutable). The registration holds
    /// them until it drops, and the device holds them while a Read it already
    /// accepted still copies. Cheap on the soft provider (a key table entry); on a
    /// NIC it pins the pages (`ibv_reg_mr`), which costs about as much as copying
    /// them once, so callers there should reuse a registration rather than make one
    /// per message.
    pub fn register_bytes(&self, bytes: bytes::Bytes) -> Result<LentBytes> {
        let mr = self.alloc(MrBuffer::lent_bytes(bytes), AccessFlags::REMOTE_READ)?;
        Ok(LentBytes { mr })
    }

    fn alloc(&self, buf: MrBuffer, access: AccessFlags) -> Result<MemoryRegion> {
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            // ibv_reg_mr returns EINVAL for this combination.
            return Err(Error::InvalidArgument(
                "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE".into(),
            ));
        }
        let buf = Arc::new(buf);
        let imp = match &self.imp {
            PdImp::Soft(pd) => MrImp::Soft(pd.register(buf.clone(), access)?),
            #[cfg(feature = "rdma")]
            PdImp::Verbs(pd) => MrImp::Verbs(pd.register(buf.clone(), access)?),
        };
        Ok(MemoryRegion::new(imp, buf, access))
    }

    /// Allocates a type-2 memory window, unbound (see [`crate::mw`]). Fails with
    /// `EOPNOTSUPP` where the device has none ([`crate::DeviceCaps::mw_type2`]).
    pub fn alloc_mw(&self) -> Result<MemoryWindow> {
        let imp = match &self.imp {
            PdImp::Soft(pd) => MwImp::Soft(pd.alloc_mw()?),
            #[cfg(feature = "rdma")]
            PdImp::Verbs(pd) => MwImp::Verbs(pd.alloc_mw()?),
        };
        Ok(MemoryWindow::new(imp))
    }

    /// Creates a queue pair in the RESET state.
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<QueuePair> {
        let imp = create_qp(&self.imp, init)?;
        Ok(QueuePair::new(imp, init, self))
    }

    /// Creates a shared receive queue.
    pub fn create_srq(&self, attr: &SrqInitAttr) -> Result<SharedReceiveQueue> {
        let imp = match &self.imp {
            PdImp::Soft(pd) => SrqImp::Soft(pd.create_srq(attr)?),
            #[cfg(feature = "rdma")]
            PdImp::Verbs(pd) => SrqImp::Verbs(pd.create_srq(attr)?),
        };
        Ok(SharedReceiveQueue::new(imp, *attr))
    }

    /// Creates an address handle for UD sends.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle> {
        let imp = match &self.imp {
            PdImp::Soft(pd) => AhImp::Soft(pd.create_ah(attr)?),
            #[cfg(feature = "rdma")]
            PdImp::Verbs(pd) => AhImp::Verbs(pd.create_ah(attr)?),
        };
        Ok(AddressHandle::new(imp, *attr))
    }
}

impl From<Arc<soft::Pd>> for PdImp {
    fn from(p: Arc<soft::Pd>) -> Self {
        PdImp::Soft(p)
    }
}

#[cfg(feature = "rdma")]
impl From<Arc<crate::verbs::Pd>> for PdImp {
    fn from(p: Arc<crate::verbs::Pd>) -> Self {
        PdImp::Verbs(p)
    }
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.device)
            .finish()
    }
}

/// An application's bytes registered where they lie ([`ProtectionDomain::register_bytes`]):
/// readable by peers through [`LentBytes::rkey`] until dropped. Unlike a
/// [`MemoryRegion`] it offers no way to write them.
pub struct LentBytes {
    mr: MemoryRegion,
}

impl LentBytes {
    /// Address of the first byte.
    pub fn addr(&self) -> u64 {
        self.mr.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mr.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.mr.is_empty()
    }

    /// The key a peer's RDMA Read names them by.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
}

impl std::fmt::Debug for LentBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LentBytes")
            .field("addr", &self.addr())
            .field("len", &self.len())
            .finish()
    }
}
