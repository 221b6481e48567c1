//! [`SlotBuf`]: received bytes as prost reads them, its small `bytes` fields cut
//! from a shared chunk instead of allocated one by one.
//!
//! A message read in place from a receive slot must copy its `bytes` fields out
//! (the slot is reposted). Copied by `Buf`'s default, each field is a `Vec` of its
//! own turned into `Bytes`: one allocation to decode it, and one more the first
//! time it is cloned (prost clones a `Bytes` field to encode it, so an echo pays
//! both). A small field is instead copied into this thread's chunk and split off
//! it: a slice of shared memory whose clone is a reference count. The chunk is
//! reused in place once every slice of it is gone, so a server whose requests'
//! bytes do not outlive their calls allocates none per call.
//!
//! A slice keeps its whole chunk alive, as a `bytes` field decoded by tonic keeps
//! its connection's read buffer: at most [`CHUNK`] bytes per slice kept, for
//! fields of at most [`SMALL`] bytes.

use std::cell::RefCell;

use bytes::{Buf, Bytes, BytesMut};

/// The largest field cut from a chunk; longer ones get memory of their own.
const SMALL: usize = 1024;
/// A chunk's size.
const CHUNK: usize = 8 * 1024;

thread_local! {
    static CHUNK_BUF: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(CHUNK));
}

/// Received bytes to decode.
pub(crate) struct SlotBuf<'a>(pub(crate) &'a [u8]);

impl Buf for SlotBuf<'_> {
    fn remaining(&self) -> usize {
        self.0.len()
    }

    fn chunk(&self) -> &[u8] {
        self.0
    }

    fn advance(&mut self, n: usize) {
        self.0 = &self.0[n..];
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        let (field, rest) = self.0.split_at(len);
        self.0 = rest;
        if len > SMALL {
            return Bytes::copy_from_slice(field);
        }
        CHUNK_BUF.with(|c| {
            let mut c = c.borrow_mut();
            // Takes the chunk back if every slice of it is gone; else a new one
            // (the size of the first).
            c.reserve(len);
            c.extend_from_slice(field);
            c.split().freeze()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_copied_out_whatever_their_size() {
        let big = vec![7u8; SMALL + 1];
        let mut data = b"abcdef".to_vec();
        data.extend_from_slice(&big);
        let mut buf = SlotBuf(&data);
        buf.advance(1);
        let a = buf.copy_to_bytes(2);
        let b = buf.copy_to_bytes(3);
        let c = buf.copy_to_bytes(SMALL + 1);
        assert_eq!(
            (&a[..], &b[..], &c[..]),
            (&b"bc"[..], &b"def"[..], &big[..])
        );
        assert_eq!(buf.remaining(), 0);
        // Each slice is its own: the chunk's next field does not show through.
        let d = SlotBuf(b"xyz").copy_to_bytes(3);
        assert_eq!((&a[..], &d[..]), (&b"bc"[..], &b"xyz"[..]));
    }

    /// Whether, on a thread of its own (a fresh chunk), the chunk's first field's
    /// memory comes back within a chunk's worth of fields while `hold` keeps the
    /// first `hold` fields.
    fn chunk_reused(hold: bool) -> bool {
        std::thread::spawn(move || {
            let first = SlotBuf(b"first").copy_to_bytes(5);
            let at = first.as_ptr();
            let kept = hold.then_some(first);
            let mut reused = false;
            for _ in 0..2 * CHUNK / SMALL {
                let field = SlotBuf(&[1u8; SMALL]).copy_to_bytes(SMALL);
                reused |= field.as_ptr() == at;
            }
            if let Some(k) = kept {
                assert_eq!(&k[..], b"first", "a slice kept is never written over");
            }
            reused
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_chunk_is_reused_once_its_slices_are_gone_and_not_before() {
        assert!(chunk_reused(false));
        assert!(!chunk_reused(true));
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct Echo {
        #[prost(bytes = "bytes", tag = "1")]
        payload: Bytes,
        #[prost(string, tag = "2")]
        name: String,
    }

    #[test]
    fn a_message_decodes_from_it() {
        use prost::Message;
        for len in [0, 32, SMALL + 1] {
            let m = Echo {
                payload: Bytes::from(vec![9u8; len]),
                name: "n".into(),
            };
            let enc = m.encode_to_vec();
            assert_eq!(Echo::decode(SlotBuf(&enc)).unwrap(), m);
        }
    }
}
