//! Whole messages that arrived together, as a receiver hands them on to its
//! reader: one message, or the messages of a batch `MSG` read in place from the one
//! copy of its entries. A batch is one event, one queue entry and one wake-up, not
//! one per message; each message is cut from the copy when read.

use bytes::{Buf, Bytes};

use crate::engine::wire::BATCH_ENTRY_HEAD;

/// Whole messages of one call, in order (an iterator: each message once).
#[derive(Debug)]
pub struct Arrived {
    /// The messages not yet read: one message, or batch entries (`len:u32` then
    /// the message) checked when the frame was read.
    rest: Bytes,
    /// Messages left in `rest`.
    left: u32,
    batch: bool,
}

impl Arrived {
    /// One message.
    pub(crate) fn one(m: Bytes) -> Arrived {
        Arrived {
            rest: m,
            left: 1,
            batch: false,
        }
    }

    /// The first `count` messages of a batch's `entries` (checked with
    /// [`crate::engine::wire::read_msg`]).
    pub(crate) fn batch(entries: Bytes, count: u32) -> Arrived {
        Arrived {
            rest: entries,
            left: count,
            batch: true,
        }
    }

    /// Messages not yet read.
    pub fn left(&self) -> u32 {
        self.left
    }
}

impl Iterator for Arrived {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if !self.batch {
            return Some(std::mem::take(&mut self.rest));
        }
        let len = self.rest.get_u32() as usize;
        debug_assert!(len <= self.rest.len(), "entries checked when read");
        Some(self.rest.split_to(len.min(self.rest.len())))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

const _: () = assert!(BATCH_ENTRY_HEAD == 4, "entry lengths are read as u32");

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
        assert_eq!(
            Arrived::one(Bytes::from_static(b"x")).collect::<Vec<_>>(),
            [&b"x"[..]]
        );
    }
}
