//! Memory regions: registered memory with its keys.

use std::sync::Arc;

use crate::access::AccessFlags;
use crate::dispatch::dispatch;
use crate::mr_buffer::MrBuffer;
use crate::soft;
use crate::wr::Sge;

pub(crate) enum MrImp {
    Soft(soft::Mr),
    #[cfg(feature = "rdma")]
    Verbs(crate::verbs::Mr),
}

/// Where a peer finds a region: what it needs for RDMA Read, Write and atomics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteMr {
    /// Virtual address of the region's first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RemoteMr {
    /// Fixed-size big-endian encoding (20 bytes: addr, len, rkey) for out-of-band exchange.
    pub fn to_bytes(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[0..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..16].copy_from_slice(&self.len.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b
    }

    /// Inverse of [`RemoteMr::to_bytes`].
    pub fn from_bytes(b: &[u8; 20]) -> RemoteMr {
        RemoteMr {
            addr: u64::from_be_bytes(b[0..8].try_into().expect("8 bytes")),
            len: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
            rkey: u32::from_be_bytes(b[16..20].try_into().expect("4 bytes")),
        }
    }
}

/// A registered memory region that owns its (page-aligned, zero-initialised) buffer.
///
/// The buffer outlives the registration: dropping the region deregisters it first and
/// frees the memory after, and the soft provider keeps the memory alive while an
/// operation that already resolved its key is still copying. Contents may be changed
/// by the device at any time a WR or a remote key allows it; [`MemoryRegion::read`]
/// and [`MemoryRegion::write`] copy through raw pointers for that reason.
pub struct MemoryRegion {
    // Field order matters: the registration drops before the memory it names.
    pub(crate) imp: MrImp,
    pub(crate) buf: Arc<MrBuffer>,
    access: AccessFlags,
}

impl MemoryRegion {
    pub(crate) fn new(imp: MrImp, buf: Arc<MrBuffer>, access: AccessFlags) -> Self {
        MemoryRegion { imp, buf, access }
    }

    /// Virtual address of the first byte (what SGEs and remote peers name).
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the region has zero length.
    pub fn is_empty(&self) -> bool {
        self.buf.len() == 0
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        dispatch!(&self.imp, MrImp, m => m.lkey())
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        dispatch!(&self.imp, MrImp, m => m.rkey())
    }

    /// Access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// An SGE for `len` bytes at `offset`. Not bounds-checked here: the device checks
    /// every SGE against the region, as hardware does.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr().wrapping_add(offset as u64),
            length: len,
            lkey: self.lkey(),
        }
    }

    /// What a peer needs to access the whole region remotely.
    pub fn remote(&self) -> RemoteMr {
        RemoteMr {
            addr: self.addr(),
            len: self.len() as u64,
            rkey: self.rkey(),
        }
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// # Panics
    /// If the range is outside the region.
    pub fn write(&self, offset: usize, src: &[u8]) {
        self.check_range(offset, src.len());
        // SAFETY: the range is inside the live buffer (checked above); raw copies form no
        // reference the device could alias, and `src` cannot overlap registered memory
        // that we hand out only through raw pointers.
        unsafe { std::ptr::copy(src.as_ptr(), self.buf.as_ptr().add(offset), src.len()) }
    }

    /// Copies bytes at `offset` out of the region into `dst`.
    ///
    /// # Panics
    /// If the range is outside the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        self.check_range(offset, dst.len());
        // SAFETY: as in `write`; the source range is inside the live buffer.
        unsafe { std::ptr::copy(self.buf.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) }
    }

    /// Reads `len` bytes at `offset` into a new vector.
    pub fn to_vec(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(offset, &mut v);
        v
    }

    /// The bytes at `offset..offset + len` as a slice.
    ///
    /// # Safety
    /// No device access that may write this range (a posted receive, an RDMA Read
    /// target, an atomic's result, or a peer's Write or atomic through the rkey) may be
    /// in flight while the slice lives.
    pub unsafe fn slice(&self, offset: usize, len: usize) -> &[u8] {
        self.check_range(offset, len);
        // SAFETY: in bounds (checked); the caller guarantees no concurrent device writes.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().add(offset), len) }
    }

    /// The bytes at `offset..offset + len` as a mutable slice.
    ///
    /// # Safety
    /// No device access to this range (read or write, local or remote) may be in
    /// flight while the slice lives, and no other slice of it may exist.
    #[allow(clippy::mut_from_ref)] // interior mutability through the device's buffer
    pub unsafe fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        self.check_range(offset, len);
        // SAFETY: in bounds (checked); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_ptr().add(offset), len) }
    }

    fn check_range(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len()),
            "range {offset}+{len} outside memory region of {} bytes",
            self.len()
        );
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("access", &self.access)
            .finish()
    }
}
