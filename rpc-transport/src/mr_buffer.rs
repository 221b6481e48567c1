//! Page-aligned memory owned by a memory region for its whole registered life.
//!
//! Each buffer is its own anonymous mapping, not a heap block: unmapping hands its
//! pages back to the kernel at once. From the heap (page-aligned `malloc` blocks in
//! glibc's per-thread arenas), a server's connection buffers stayed resident after
//! their connections closed: 300 connections left ~95 MB of freed arena memory that
//! nothing in use pinned, growing over rounds of connections. A mapping also comes
//! zeroed by the kernel, so pages the region never touches never become resident.
//!
//! Bulk buffers ([`MrBuffer::zeroed_bulk`]) of 2 MiB and more start on a 2 MiB
//! boundary and ask for transparent huge pages (`MADV_HUGEPAGE`, honoured where THP is
//! `madvise` or `always`). The rendezvous pools' large bodies are such buffers: the
//! soft provider's same-host link copies them with `process_vm_writev`, which pins the
//! peer's destination page by page, and with 4 KiB pages that pinning walk cost about
//! half as much as the copy itself (perf, a 4 MiB echo: `follow_page_pte`,
//! `__get_user_pages` and their kin ~14 % of samples, `_copy_from_iter` 31 %); a huge
//! page is pinned in one step and takes one TLB entry. Receive pools and send rings
//! stay on small pages: they are touched a slot at a time, and a huge page would make
//! 2 MiB resident for the first 8 KiB slot used. Where THP is off the advice is
//! ignored and nothing else changes.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

const PAGE: usize = 4096;
/// A transparent huge page on x86-64 and aarch64 with 4 KiB pages; buffers this
/// long or longer are aligned to it and advised to use huge pages.
const HUGE: usize = 2 * 1024 * 1024;

/// Zeroed, page-aligned bytes that never move. Only raw-pointer access is offered:
/// the device (a NIC, or the soft provider on another thread) may write it at any
/// time it holds a matching key, so no `&[u8]` to it is formed outside code that
/// knows no such access can be in flight.
pub(crate) struct MrBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// An application's `Bytes` registered where they lie ([`MrBuffer::lent_bytes`])
    /// instead of a mapping of our own: kept alive, never written, never unmapped.
    lent: Option<bytes::Bytes>,
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
        Self::map(len, false)
    }

    /// As [`MrBuffer::zeroed`], for a body copied whole (module docs): from 2 MiB on,
    /// aligned to a huge page and advised to use huge pages.
    pub(crate) fn zeroed_bulk(len: usize) -> MrBuffer {
        Self::map(len, true)
    }

    /// The bytes of `b` where they lie, owned by the buffer until it drops. They are
    /// immutable (a `Bytes` promises that to every holder), so only a registration
    /// without write rights may name them (`ProtectionDomain::register_bytes`).
    pub(crate) fn lent_bytes(b: bytes::Bytes) -> MrBuffer {
        let ptr = NonNull::new(b.as_ptr().cast_mut()).expect("a Bytes' pointer is never null");
        MrBuffer {
            ptr,
            len: b.len(),
            lent: Some(b),
        }
    }

    fn map(len: usize, bulk: bool) -> MrBuffer {
        let layout = Self::layout(len);
        let size = layout.size();
        // Room to slide the start to a huge-page boundary, trimmed off below.
        let slop = if bulk && size >= HUGE { HUGE } else { 0 };
        // SAFETY: a fresh private anonymous mapping of `size + slop` (non-zero) bytes;
        // it aliases nothing; what `drop` does not unmap is unmapped right below.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size + slop,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            alloc::handle_alloc_error(layout);
        }
        let start = raw as usize;
        let aligned = if slop > 0 {
            start.next_multiple_of(HUGE)
        } else {
            start
        };
        let (head, tail) = (aligned - start, slop - (aligned - start));
        // SAFETY: both ranges are page-aligned (mmap's start and `size` are, and so
        // is `HUGE`) and lie inside the mapping just made, outside `[aligned, aligned
        // + size)`, which stays mapped; nothing refers to them. A failed unmap only
        // leaves unused address space mapped.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + size) as *mut libc::c_void, tail);
            }
            if slop > 0 {
                // Advice only: refused (THP off, an old kernel) it changes nothing.
                libc::madvise(aligned as *mut libc::c_void, size, libc::MADV_HUGEPAGE);
            }
        }
        let ptr =
            NonNull::new(aligned as *mut u8).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        MrBuffer {
            ptr,
            len,
            lent: None,
        }
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
        if self.lent.is_some() {
            return; // the application's memory: the `Bytes` frees it, if last
        }
        // SAFETY: `ptr` is the start of a mapping of exactly this size, unmapped once;
        // the region that owned it is gone, so no access can follow.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), Self::layout(self.len).size()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `buf` end to end through its raw pointer and reads it back.
    fn fill_and_check(buf: &MrBuffer, seed: u8) {
        let p = buf.as_ptr();
        for i in (0..buf.len()).step_by(PAGE / 2) {
            // SAFETY: `i < len`, inside the buffer; nothing else accesses it.
            unsafe { p.add(i).write(seed.wrapping_add(i as u8)) };
        }
        for i in (0..buf.len()).step_by(PAGE / 2) {
            // SAFETY: as above.
            assert_eq!(unsafe { p.add(i).read() }, seed.wrapping_add(i as u8));
        }
    }

    #[test]
    fn large_bulk_buffers_start_on_a_huge_page_boundary_and_others_on_a_page() {
        for len in [HUGE, HUGE + 1, 4 * HUGE + 64 * 1024] {
            let b = MrBuffer::zeroed_bulk(len);
            assert_eq!(b.as_ptr() as usize % HUGE, 0, "{len} bytes");
            assert_eq!(b.len(), len);
            fill_and_check(&b, 7);
            assert!(b.contains(b.as_ptr() as u64, len as u64));
            assert!(!b.contains(b.as_ptr() as u64, len as u64 + 1));
        }
        for (len, bulk) in [(0, true), (1, true), (HUGE - PAGE, true), (4 * HUGE, false)] {
            let b = MrBuffer::map(len, bulk);
            assert_eq!(b.as_ptr() as usize % PAGE, 0, "{len} bytes");
            fill_and_check(&b, 3);
        }
    }
}
