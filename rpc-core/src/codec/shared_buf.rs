//! Decoding a message in place from a buffer it shares with other messages (a
//! stream's batch frame): a `bytes` field of it becomes a view of that buffer
//! (one reference count, nothing copied), and the message itself takes no
//! buffer handle of its own.

use std::ops::Range;

use bytes::{Buf, Bytes};

/// Bytes `range` of `all`, read as a [`Buf`].
pub(crate) struct SharedBuf<'a> {
    all: &'a Bytes,
    at: usize,
    end: usize,
}

impl<'a> SharedBuf<'a> {
    /// # Panics
    /// If `range` is not within `all`.
    pub(crate) fn new(all: &'a Bytes, range: Range<usize>) -> Self {
        assert!(range.start <= range.end && range.end <= all.len());
        SharedBuf {
            all,
            at: range.start,
            end: range.end,
        }
    }
}

impl Buf for SharedBuf<'_> {
    fn remaining(&self) -> usize {
        self.end - self.at
    }

    fn chunk(&self) -> &[u8] {
        &self.all[self.at..self.end]
    }

    fn advance(&mut self, n: usize) {
        assert!(n <= self.remaining(), "advanced past the message");
        self.at += n;
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        assert!(len <= self.remaining(), "read past the message");
        let b = self.all.slice(self.at..self.at + len);
        self.at += len;
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bytes_field_is_a_view_of_the_shared_buffer_and_reads_stop_at_the_range() {
        let all = Bytes::from(b"xx\x0a\x03abcyy".to_vec());
        // Field 1, length-delimited, 3 bytes: "abc", between other messages' bytes.
        let mut buf = SharedBuf::new(&all, 2..7);
        assert_eq!(buf.remaining(), 5);
        assert_eq!(buf.get_u8(), 0x0a);
        assert_eq!(buf.get_u8(), 3);
        let field = buf.copy_to_bytes(3);
        assert_eq!(&field[..], b"abc");
        assert_eq!(field.as_ptr(), all[4..].as_ptr(), "a view, not a copy");
        assert_eq!(buf.remaining(), 0);
        let decoded: Vec<u8> = prost::Message::decode(SharedBuf::new(&all, 2..7))
            .map(|v: BytesValue| v.value.to_vec())
            .unwrap();
        assert_eq!(decoded, b"abc");
    }

    /// A message with one `bytes` field (number 1).
    #[derive(Clone, PartialEq, prost::Message)]
    struct BytesValue {
        #[prost(bytes = "bytes", tag = "1")]
        value: Bytes,
    }
}
