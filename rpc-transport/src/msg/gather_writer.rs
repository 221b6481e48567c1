//! `GatherWriter`: encoding a message as a gather list. The bytes it holds that
//! lie in a region a [`RegionPool`](super::RegionPool) shared as `Bytes` (a body
//! received and echoed, forwarded, or sliced) are referenced where they lie; the
//! rest (tags, lengths, short fields) is copied into inline runs. prost writes a
//! `Bytes` field with `BufMut::put` and everything else with `put_slice`, so a
//! writer that overrides both sees every chunk's address, and through `put` can
//! hold a `Bytes` chunk itself: a client lends its request's `Bytes` fields where
//! they lie ([`BytesLender`]), registered for the server's Read. rpc-core's
//! `engine::gather` has the wire layout, `docs/large-messages.md` ("Lending received
//! bytes where they lie") the rules.

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes};

use super::region_pool::{RegionPool, SharedRegion};
use crate::pd::{LentBytes, ProtectionDomain};

/// Chunks shorter than this are copied even when they lie in registered memory: a
/// reference costs a Read WR and a window bind, which a short copy beats.
pub const MIN_REF_BYTES: usize = 16 * 1024;
/// Inline bytes one list carries at most (they travel in the frame beside the head
/// and metadata); a message with more is copied whole as before.
pub const MAX_INLINE_BYTES: usize = 1024;

/// What a reference holds until the peer has read it.
#[derive(Debug)]
pub enum Keep {
    /// A region of a read pool that received the bytes (a server's echo).
    Pool(SharedRegion),
    /// The application's bytes, registered where they lie (a client's request).
    Bytes(LentBytes),
}

/// Where a [`GatherWriter`] may reference a chunk instead of copying it.
pub trait Lender {
    /// `chunk`, if it lies in memory already registered.
    fn find(&self, chunk: &[u8]) -> Option<Keep>;
    /// A chunk the message holds as `Bytes` (prost's `bytes::Bytes` fields): by
    /// default as [`Lender::find`]; a lender may register it where it lies.
    fn capture(&self, chunk: Bytes) -> Option<Keep> {
        self.find(&chunk)
    }
}

/// Bytes received into the pool and shared as `Bytes` (a server's echo).
impl Lender for RegionPool {
    fn find(&self, chunk: &[u8]) -> Option<Keep> {
        self.shared_containing(chunk).map(Keep::Pool)
    }
}

/// Registers every `Bytes` chunk where it lies, readable until the list drops: for
/// the soft provider, whose registration is a key-table entry. (On a NIC a
/// registration pins pages and costs about a copy; the copy stays the path there.)
pub struct BytesLender<'a>(pub &'a ProtectionDomain);

impl Lender for BytesLender<'_> {
    fn find(&self, _chunk: &[u8]) -> Option<Keep> {
        None
    }

    fn capture(&self, chunk: Bytes) -> Option<Keep> {
        self.0.register_bytes(chunk).ok().map(Keep::Bytes)
    }
}

/// One part of a gathered body.
#[derive(Debug)]
pub enum GatherPart {
    /// Bytes `inline[range]`.
    Inline(std::ops::Range<usize>),
    /// `len` bytes at `addr`, inside `region` (held until the peer read them).
    Ref {
        /// What they lie in, held until dropped.
        region: Keep,
        /// Address of the first byte.
        addr: u64,
        /// Bytes.
        len: usize,
    },
}

/// A body encoded as a gather list, ready to lend.
#[derive(Debug)]
pub struct Gathered {
    /// The inline runs' bytes, back to back.
    pub inline: Vec<u8>,
    /// The parts in body order.
    pub parts: Vec<GatherPart>,
}

/// The `BufMut` a message encodes into to be gathered. Its methods are prost's
/// business; build one only through the transport.
pub struct GatherWriter<'a> {
    lender: &'a dyn Lender,
    max_parts: usize,
    inline: Vec<u8>,
    run_start: usize,
    parts: Vec<GatherPart>,
    /// The message does not fit a list (too many inline bytes or parts).
    spilled: bool,
}

impl<'a> GatherWriter<'a> {
    /// A writer that references the chunks `lender` finds or registers, for a list
    /// of at most `max_parts` parts.
    pub fn new(lender: &'a dyn Lender, max_parts: usize) -> Self {
        GatherWriter {
            lender,
            max_parts,
            inline: Vec::new(),
            run_start: 0,
            parts: Vec::new(),
            spilled: false,
        }
    }

    fn close_run(&mut self) {
        if self.inline.len() > self.run_start {
            self.parts
                .push(GatherPart::Inline(self.run_start..self.inline.len()));
            self.run_start = self.inline.len();
        }
    }

    fn take(&mut self, chunk: &[u8]) {
        if self.spilled || chunk.is_empty() {
            return;
        }
        if chunk.len() >= MIN_REF_BYTES {
            if let Some(region) = self.lender.find(chunk) {
                return self.reference(region, chunk);
            }
        }
        self.copy(chunk);
    }

    /// As `take`, for a chunk held as `Bytes`, which the lender may register.
    fn take_owned(&mut self, chunk: Bytes) {
        if self.spilled {
            return;
        }
        let lent = self.lender.capture(chunk.clone());
        match lent {
            Some(region) => self.reference(region, &chunk),
            None => self.copy(&chunk),
        }
    }

    fn reference(&mut self, region: Keep, chunk: &[u8]) {
        self.close_run();
        self.parts.push(GatherPart::Ref {
            region,
            addr: chunk.as_ptr() as u64,
            len: chunk.len(),
        });
        self.spilled |= self.parts.len() > self.max_parts;
    }

    fn copy(&mut self, chunk: &[u8]) {
        if self.inline.len() + chunk.len() > MAX_INLINE_BYTES {
            self.spilled = true;
            return;
        }
        self.inline.extend_from_slice(chunk);
    }

    /// The list, if the message fits one and references something.
    pub fn finish(mut self) -> Option<Gathered> {
        self.close_run();
        let refs = self
            .parts
            .iter()
            .any(|p| matches!(p, GatherPart::Ref { .. }));
        (!self.spilled && refs && self.parts.len() <= self.max_parts).then_some(Gathered {
            inline: self.inline,
            parts: self.parts,
        })
    }
}

// SAFETY: `chunk_mut` and `advance_mut` forward to the inline buffer, a `Vec<u8>`,
// which keeps the trait's contract; the other methods only copy or record.
unsafe impl BufMut for GatherWriter<'_> {
    fn remaining_mut(&self) -> usize {
        isize::MAX as usize - self.inline.len()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of the `chunk_mut` we handed out,
        // which is the inline buffer's.
        unsafe { self.inline.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.inline.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        self.take(src);
    }

    fn put<T: Buf>(&mut self, mut src: T)
    where
        Self: Sized,
    {
        let n = src.remaining();
        if n >= MIN_REF_BYTES && src.chunk().len() == n {
            // prost puts a `Bytes` field whole; `copy_to_bytes` of a `Bytes` is a
            // shared handle, not a copy (same address), which the lender may keep.
            let at = src.chunk().as_ptr();
            let owned = src.copy_to_bytes(n);
            if owned.as_ptr() == at {
                return self.take_owned(owned);
            }
            return self.take(&owned);
        }
        while src.has_remaining() {
            let n = src.chunk().len();
            self.take(src.chunk());
            src.advance(n);
        }
    }
}

impl std::fmt::Debug for GatherWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatherWriter")
            .field("inline", &self.inline.len())
            .field("parts", &self.parts.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::msg::{RegionPool, GRAIN};
    use bytes::Bytes;

    fn shared(pool: &RegionPool, data: &[u8]) -> Bytes {
        let mut r = pool.try_take(data.len()).unwrap().expect("room");
        r.buf_mut()[..data.len()].copy_from_slice(data);
        r.into_bytes(data.len())
    }

    #[test]
    fn received_bytes_are_referenced_and_the_rest_copied_in_order() {
        let dev = Device::open_soft(crate::SoftConfig::default()).expect("soft device");
        let pool = RegionPool::new(&dev.alloc_pd().expect("pd"), 16 * GRAIN);
        let body: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let received = shared(&pool, &body);
        let mut w = GatherWriter::new(&pool, 16);
        w.put_slice(b"\x0a");
        w.put_u8(0x80);
        w.put(received.slice(10..MIN_REF_BYTES + 10));
        w.put(Bytes::from(vec![7u8; MIN_REF_BYTES])); // not registered: copied
        let g = w.finish();
        assert!(g.is_none(), "16 KiB of copies do not fit inline: {g:?}");

        let mut w = GatherWriter::new(&pool, 16);
        w.put_slice(b"\x0a\x80");
        w.put(received.slice(10..MIN_REF_BYTES + 10));
        w.put(received.slice(0..100)); // too short to reference
        w.put_slice(b"");
        w.put(received.clone());
        let g = w.finish().expect("a list");
        assert_eq!(g.inline.len(), 2 + 100);
        assert_eq!(&g.inline[2..], &body[..100]);
        let shape: Vec<(bool, usize)> = g
            .parts
            .iter()
            .map(|p| match p {
                GatherPart::Inline(r) => (false, r.len()),
                GatherPart::Ref { len, .. } => (true, *len),
            })
            .collect();
        assert_eq!(
            shape,
            [
                (false, 2),
                (true, MIN_REF_BYTES),
                (false, 100),
                (true, body.len())
            ]
        );
        let GatherPart::Ref { addr, .. } = &g.parts[1] else {
            unreachable!()
        };
        assert_eq!(*addr, received.as_ptr() as u64 + 10);
        drop(received);
        assert_eq!(pool.stats().regions_in_use, 1, "held by the list's handles");
        drop(g);
        assert_eq!(pool.stats().regions_in_use, 0);
    }

    #[test]
    fn too_many_parts_or_no_reference_give_no_list() {
        let dev = Device::open_soft(crate::SoftConfig::default()).expect("soft device");
        let pool = RegionPool::new(&dev.alloc_pd().expect("pd"), 16 * GRAIN);
        let received = shared(&pool, &vec![1u8; 4 * MIN_REF_BYTES]);
        let mut w = GatherWriter::new(&pool, 3);
        for i in 0..3 {
            w.put_u8(i);
            w.put(received.slice(..MIN_REF_BYTES));
        }
        assert!(w.finish().is_none(), "6 parts of at most 3");
        let mut w = GatherWriter::new(&pool, 3);
        w.put_slice(b"abc");
        assert!(w.finish().is_none(), "nothing referenced");
    }

    #[test]
    fn a_bytes_lender_registers_bytes_chunks_where_they_lie_and_copies_slices() {
        let dev = Device::open_soft(crate::SoftConfig::default()).expect("soft device");
        let pd = dev.alloc_pd().expect("pd");
        let lender = BytesLender(&pd);
        let payload = Bytes::from(vec![9u8; 3 * MIN_REF_BYTES]);
        let mut w = GatherWriter::new(&lender, 16);
        w.put_slice(b"\x0a\x80\x80\x03");
        w.put(payload.clone());
        let g = w.finish().expect("a list");
        assert_eq!(g.inline, b"\x0a\x80\x80\x03");
        let GatherPart::Ref {
            region: Keep::Bytes(lent),
            addr,
            len,
        } = &g.parts[1]
        else {
            panic!("not lent in place: {:?}", g.parts)
        };
        assert_eq!((*addr, *len), (payload.as_ptr() as u64, payload.len()));
        assert_eq!((lent.addr(), lent.len()), (*addr, *len));

        // The same bytes as a slice (a `Vec<u8>` field) cannot be kept: copied, and
        // too long to travel inline.
        let mut w = GatherWriter::new(&lender, 16);
        w.put_slice(&payload);
        assert!(w.finish().is_none());
    }
}
