//! Page-aligned memory owned by a memory region for its whole registered life.
//!
//! Each buffer is its own anonymous mapping, not a heap block: unmapping hands its
//! pages back to the kernel at once. From the heap (page-aligned `malloc` blocks in
//! glibc's per-thread arenas), a server's connection buffers stayed resident after
//! their connections closed: 300 connections left ~95 MB of freed arena memory that
//! nothing in use pinned, growing over rounds of connections. A mapping also comes
//! zeroed by the kernel, so pages the region never touches never become resident.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

const PAGE: usize = 4096;

/// Zeroed, page-aligned bytes that never move. Only raw-pointer access is offered:
/// the device (a NIC, or the soft provider on another thread) may write it at any
/// time it holds a matching key, so no `&[u8]` to it is formed outside code that
/// knows no such access can be in flight.
pub(crate) struct MrBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain bytes with no thread affinity; every access goes through
// raw pointers whose synchronisation is the caller's contract (see `MemoryRegion`).
unsafe impl Send for MrBuffer {}
// SAFETY: as above; `&MrBuffer` only hands out raw pointers.
unsafe impl Sync for MrBuffer {}

impl MrBuffer {
    /// Allocates `len` zeroed bytes (at least one page is reserved so that a zero-length
    /// region still has a valid address).
    pub(crate) fn zeroed(len: usize) -> MrBuffer {
        let layout = Self::layout(len);
        // SAFETY: a fresh private anonymous mapping of `layout.size()` (non-zero) bytes;
        // it aliases nothing and is unmapped once, in `drop`.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            alloc::handle_alloc_error(layout);
        }
        let ptr = NonNull::new(raw.cast()).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        MrBuffer { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        let size = len.max(1).div_ceil(PAGE) * PAGE;
        Layout::from_size_align(size, PAGE).expect("memory region size overflows")
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether `[addr, addr + len)` lies inside this buffer.
    pub(crate) fn contains(&self, addr: u64, len: u64) -> bool {
        let start = self.ptr.as_ptr() as u64;
        addr >= start
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= start + self.len as u64)
    }
}

impl Drop for MrBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the start of a mapping of exactly this size, unmapped once;
        // the region that owned it is gone, so no access can follow.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), Self::layout(self.len).size()) };
    }
}
