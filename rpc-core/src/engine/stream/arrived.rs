//! Whole messages that arrived together, as a receiver hands them on to its
//! reader: one message, or the messages of a batch `MSG` read in place from the one
//! copy of its entries. A batch is one event, one queue entry and one wake-up, not
//! one per message; each message is cut from the copy when read.

use std::ops::Range;

use bytes::Bytes;

use crate::engine::wire::BATCH_ENTRY_HEAD;

/// Whole messages of one call, in order (an iterator: each message once).
#[derive(Debug)]
pub struct Arrived {
    /// One message, or batch entries (`len:u32` then the message) checked when
    /// the frame was read.
    buf: Bytes,
    /// Where the next batch entry starts in `buf`.
    at: usize,
    /// Messages not yet read.
    left: u32,
    batch: bool,
}

impl Arrived {
    /// One message.
    pub(crate) fn one(m: Bytes) -> Arrived {
        Arrived {
            buf: m,
            at: 0,
            left: 1,
            batch: false,
        }
    }

    /// The first `count` messages of a batch's `entries` (checked with
    /// [`crate::engine::wire::read_msg`]).
    pub(crate) fn batch(entries: Bytes, count: u32) -> Arrived {
        Arrived {
            buf: entries,
            at: 0,
            left: count,
            batch: true,
        }
    }

    /// Messages not yet read.
    pub fn left(&self) -> u32 {
        self.left
    }

    /// The next message where it lies: the buffer it shares with the others, and
    /// its bytes there (read in place, no handle of its own).
    pub fn next_in_place(&mut self) -> Option<(&Bytes, Range<usize>)> {
        let r = self.next_range()?;
        Some((&self.buf, r))
    }

    fn next_range(&mut self) -> Option<Range<usize>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if !self.batch {
            return Some(0..self.buf.len());
        }
        let head = self.at..self.at + BATCH_ENTRY_HEAD;
        let len = u32::from_be_bytes(self.buf[head].try_into().expect("4 bytes")) as usize;
        let start = self.at + BATCH_ENTRY_HEAD;
        self.at = start + len;
        debug_assert!(self.at <= self.buf.len(), "entries checked when read");
        Some(start..self.at.min(self.buf.len()))
    }
}

impl Iterator for Arrived {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if !self.batch && self.left == 1 {
            self.left = 0;
            return Some(std::mem::take(&mut self.buf));
        }
        let r = self.next_range()?;
        Some(self.buf.slice(r))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::wire::{read_msg, BatchWriter, MsgFrame};

    #[test]
    fn a_batch_reads_back_its_messages_in_order_and_only_the_count_given() {
        let mut frame = vec![0u8; 256];
        let mut w = BatchWriter::new(&mut frame);
        for m in [&b"one"[..], b"", b"three"] {
            assert!(w.push(m.len(), |o| o.copy_from_slice(m)));
        }
        let n = w.finish();
        let Ok(MsgFrame::Batch(b)) = read_msg(&frame[..n]) else {
            panic!("a batch");
        };
        let all: Vec<Bytes> = Arrived::batch(Bytes::copy_from_slice(b.entries()), 3).collect();
        assert_eq!(all, [&b"one"[..], b"", b"three"]);
        let prefix = Arrived::batch(Bytes::copy_from_slice(b.entries()), 2);
        assert_eq!(prefix.left(), 2);
        assert_eq!(prefix.collect::<Vec<_>>(), [&b"one"[..], b""]);
        let mut in_place = Arrived::batch(Bytes::copy_from_slice(b.entries()), 3);
        let mut seen = vec![];
        while let Some((buf, r)) = in_place.next_in_place() {
            seen.push(buf[r].to_vec());
        }
        assert_eq!(seen, [&b"one"[..], b"", b"three"]);
        assert_eq!(
            Arrived::one(Bytes::from_static(b"x")).collect::<Vec<_>>(),
            [&b"x"[..]]
        );
    }
}
