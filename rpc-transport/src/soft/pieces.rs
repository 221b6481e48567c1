//! Checked ranges of registered memory that a frame's payload comes from or goes to,
//! so that the socket reads and writes them directly (no staging copy).
//!
//! An SGE list is resolved once per frame: every SGE the payload touches passes the key
//! check (key, PD, bounds, rights) before any byte moves, and each piece holds its
//! buffer alive (an `Arc` clone, not an allocation), so a deregistration racing with
//! the transfer cannot free memory the socket is still reading or writing.

use std::sync::Arc;

use crate::access::AccessFlags;
use crate::mr_buffer::MrBuffer;
use crate::wr::Sge;

use super::device::MAX_SGE;
use super::keys::{KeyError, KeyTable};

/// One contiguous range of registered memory.
pub(crate) struct Piece {
    ptr: *mut u8,
    len: usize,
    _keep: Option<Arc<MrBuffer>>,
}

impl Piece {
    const EMPTY: Piece = Piece {
        ptr: std::ptr::null_mut(),
        len: 0,
        _keep: None,
    };
}

/// Up to [`MAX_SGE`] pieces, consumed front to back. No pieces at all means "discard":
/// the payload is taken off the stream and written nowhere.
pub(crate) struct Pieces {
    at: [Piece; MAX_SGE],
    n: usize,
    first: usize,
    left: usize,
}

// SAFETY: the pointers are into buffers the pieces keep alive (`_keep`); they are used
// only under the QP lock, through raw copies and socket calls, as a NIC would access
// the memory.
unsafe impl Send for Pieces {}

/// Why a payload cannot go to (or come from) an SGE list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlanError {
    /// A key, PD, bounds or rights check failed.
    Prot(KeyError),
    /// The list is shorter than the payload.
    Len,
}

impl Pieces {
    pub(crate) const fn discard() -> Pieces {
        Pieces {
            at: [Piece::EMPTY; MAX_SGE],
            n: 0,
            first: 0,
            left: 0,
        }
    }

    /// Drops every piece (and the buffers they hold).
    pub(crate) fn clear(&mut self) {
        for p in &mut self.at[..self.n] {
            *p = Piece::EMPTY;
        }
        self.n = 0;
        self.first = 0;
        self.left = 0;
    }

    /// Whether there is nowhere to put bytes (a discarded payload, or all delivered).
    pub(crate) fn is_discard(&self) -> bool {
        self.left == 0
    }

    /// Bytes not yet moved.
    pub(crate) fn left(&self) -> usize {
        self.left
    }

    /// One range: `ptr..ptr + len` inside the live buffer `keep`.
    pub(crate) fn set_one(&mut self, ptr: *mut u8, len: usize, keep: Arc<MrBuffer>) {
        self.clear();
        self.at[0] = Piece {
            ptr,
            len,
            _keep: Some(keep),
        };
        self.n = usize::from(len > 0);
        self.left = len;
    }

    /// Resolves bytes `[offset, offset + len)` of the concatenation of `sges`, checking
    /// each SGE it touches whole (key, PD, bounds, `need`). On error nothing is kept.
    pub(crate) fn resolve(
        &mut self,
        keys: &KeyTable,
        pd: u32,
        sges: &[Sge],
        offset: u64,
        len: usize,
        need: AccessFlags,
    ) -> Result<(), PlanError> {
        self.clear();
        let mut skip = offset;
        for sge in sges {
            if self.left == len {
                break;
            }
            let l = u64::from(sge.length);
            if skip >= l {
                skip -= l;
                continue;
            }
            let n = ((l - skip) as usize).min(len - self.left);
            let r = match keys.resolve(sge.lkey, pd, sge.addr, l, need) {
                Ok(r) => r,
                Err(e) => {
                    self.clear();
                    return Err(PlanError::Prot(e));
                }
            };
            self.at[self.n] = Piece {
                // `[r.ptr + skip, + n)` lies inside the SGE, which `resolve` checked.
                ptr: r.ptr.wrapping_add(skip as usize),
                len: n,
                _keep: Some(r.buf),
            };
            self.n += 1;
            self.left += n;
            skip = 0;
        }
        if self.left < len {
            self.clear();
            return Err(PlanError::Len);
        }
        Ok(())
    }

    /// Fills `out` with iovecs over the bytes not yet moved; returns how many.
    pub(crate) fn iovecs(&self, out: &mut [libc::iovec]) -> usize {
        let mut k = 0;
        for p in &self.at[self.first..self.n] {
            if k == out.len() {
                break;
            }
            if p.len == 0 {
                continue;
            }
            out[k] = libc::iovec {
                iov_base: p.ptr.cast(),
                iov_len: p.len,
            };
            k += 1;
        }
        k
    }

    /// Marks `n` bytes as moved (by the socket).
    pub(crate) fn advance(&mut self, mut n: usize) {
        debug_assert!(n <= self.left);
        self.left -= n;
        while n > 0 && self.first < self.n {
            let p = &mut self.at[self.first];
            let k = n.min(p.len);
            p.ptr = p.ptr.wrapping_add(k);
            p.len -= k;
            n -= k;
            if p.len == 0 {
                self.first += 1;
            }
        }
        if self.left == 0 {
            self.clear();
        }
    }

    /// Hands each piece (pointer, length, the buffer holding it) to `f`, emptying
    /// `self`.
    pub(crate) fn take_each(&mut self, mut f: impl FnMut(*mut u8, usize, Arc<MrBuffer>)) {
        for p in &mut self.at[self.first..self.n] {
            let p = std::mem::replace(p, Piece::EMPTY);
            if let (Some(keep), true) = (p._keep, p.len > 0) {
                f(p.ptr, p.len, keep);
            }
        }
        self.clear();
    }

    /// Fills the next `n` bytes of the pieces (at most [`Pieces::left`]) piece by
    /// piece: `copy(offset, dst)` writes bytes `offset..offset + dst.len()` of the
    /// source into `dst`. No iovec list is built first: a ring's payload is copied
    /// straight into its receive, a small one in a single call.
    pub(crate) fn fill_with(&mut self, n: usize, mut copy: impl FnMut(usize, &mut [u8])) {
        let mut done = 0;
        while done < n && self.first < self.n {
            let (ptr, len) = (self.at[self.first].ptr, self.at[self.first].len);
            let k = (n - done).min(len);
            // SAFETY: `ptr..+k` is inside a checked range of a buffer the piece keeps
            // alive, and nothing else borrows it while the provider moves the payload
            // (the QP lock is held).
            copy(done, unsafe { std::slice::from_raw_parts_mut(ptr, k) });
            done += k;
            self.advance(k);
        }
        debug_assert_eq!(done, n, "the pieces hold the whole payload");
    }

    /// Copies provider-private bytes into the next `data.len()` bytes of the pieces
    /// (at most [`Pieces::left`]).
    pub(crate) fn put(&mut self, data: &[u8]) {
        let n = data.len().min(self.left);
        self.fill_with(n, |at, dst| dst.copy_from_slice(&data[at..at + dst.len()]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_checks_every_sge_before_keeping_any() {
        let keys = KeyTable::default();
        let a = Arc::new(MrBuffer::zeroed(16));
        let b = Arc::new(MrBuffer::zeroed(16));
        let ka = keys.insert(a.clone(), 1, AccessFlags::LOCAL_WRITE);
        let kb = keys.insert(b.clone(), 1, AccessFlags::empty());
        let sge = |buf: &MrBuffer, key, off: u64, len| Sge {
            addr: buf.as_ptr() as u64 + off,
            length: len,
            lkey: key,
        };
        let mut p = Pieces::discard();
        let list = [sge(&a, ka, 0, 4), sge(&a, ka, 8, 4)];
        p.resolve(&keys, 1, &list, 1, 6, AccessFlags::LOCAL_WRITE)
            .unwrap();
        assert_eq!(p.left(), 6);
        p.put(b"bcd");
        p.put(b"efg");
        assert!(p.is_discard());
        let mut got = [0u8; 12];
        // SAFETY: 12 bytes inside the 16-byte buffer; nothing else touches it now.
        unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), got.as_mut_ptr(), 12) };
        assert_eq!(&got, b"\0bcd\0\0\0\0efg\0");

        assert_eq!(
            p.resolve(&keys, 1, &list, 0, 9, AccessFlags::LOCAL_WRITE),
            Err(PlanError::Len)
        );
        // The second SGE lacks the right: refused, although the first one is fine.
        let mixed = [sge(&a, ka, 0, 4), sge(&b, kb, 0, 4)];
        assert_eq!(
            p.resolve(&keys, 1, &mixed, 0, 8, AccessFlags::LOCAL_WRITE),
            Err(PlanError::Prot(KeyError::Rights))
        );
        assert!(p.is_discard());
    }
}
