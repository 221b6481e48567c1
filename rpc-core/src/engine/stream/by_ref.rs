//! Stream messages by reference, as one side's engine tracks them (see
//! [`crate::engine::wire`], "Large messages by reference"): the messages it reads
//! (their Reads for the driver, and the `RDONE`s it owes), and the messages it lent
//! (released by the peer's `RDONE` alone: the reader owes one for every message it
//! got, so a region is never freed while its reader may still read it, and a late
//! `RDONE` never frees a region lent again since).

use std::collections::VecDeque;

use crate::engine::rendezvous::{ReadOp, STREAM_READ_TAG};
use crate::engine::wire::Descriptor;
use crate::id_map::IdMap;

/// One side's stream messages by reference, both ways.
#[derive(Debug, Default)]
pub(crate) struct ByRef {
    /// The next read tag (below [`STREAM_READ_TAG`], which marks it).
    next_tag: u32,
    /// Reads in progress: tag to the call and the lent address.
    reading: IdMap<u32, (u32, u64)>,
    /// Reads for the driver to start.
    ops: VecDeque<ReadOp>,
    /// Addresses of the peer's messages this side will not read any more: an
    /// `RDONE` each.
    rdones: VecDeque<u64>,
    /// Messages lent to the peer: address to call.
    lent: IdMap<u64, u32>,
    /// Lent addresses the driver may reuse.
    released: VecDeque<u64>,
}

impl ByRef {
    /// A message of call `id` by reference is to be read: its tag.
    pub(crate) fn read(&mut self, id: u32, desc: Descriptor) -> u32 {
        let tag = loop {
            let t = self.next_tag | STREAM_READ_TAG;
            self.next_tag = (self.next_tag + 1) & !STREAM_READ_TAG;
            if !self.reading.contains_key(&t) {
                break t;
            }
        };
        self.reading.insert(tag, (id, desc.addr));
        self.ops.push_back(ReadOp {
            id: tag,
            desc,
            gather: None,
            head_len: 0,
        });
        tag
    }

    /// A message by reference this side will not read (refused, or its call is
    /// over here): the peer hears so at once.
    pub(crate) fn refuse(&mut self, desc: Descriptor) {
        self.rdones.push_back(desc.addr);
    }

    /// The read `tag` ended: its call, with the `RDONE` queued (`None`: not ours).
    pub(crate) fn finished(&mut self, tag: u32) -> Option<u32> {
        let (id, addr) = self.reading.remove(&tag)?;
        self.rdones.push_back(addr);
        Some(id)
    }

    /// The next read for the driver.
    pub(crate) fn poll_read(&mut self) -> Option<ReadOp> {
        self.ops.pop_front()
    }

    /// Whether an `RDONE` waits to go.
    pub(crate) fn owes_rdone(&self) -> bool {
        !self.rdones.is_empty()
    }

    /// The next `RDONE`'s address.
    pub(crate) fn poll_rdone(&mut self) -> Option<u64> {
        self.rdones.pop_front()
    }

    /// A message of call `id` lent at `addr`.
    pub(crate) fn lend(&mut self, id: u32, addr: u64) {
        self.lent.insert(addr, id);
    }

    /// The peer's `RDONE` for `addr`; `false` if nothing is lent there.
    pub(crate) fn on_rdone(&mut self, addr: u64) -> bool {
        if self.lent.remove(&addr).is_none() {
            return false;
        }
        self.released.push_back(addr);
        true
    }

    /// The next lent address the driver may reuse.
    pub(crate) fn poll_released(&mut self) -> Option<u64> {
        self.released.pop_front()
    }

    /// Whether reads to start or regions to free wait for the driver.
    pub(crate) fn pending(&self) -> bool {
        !self.ops.is_empty() || !self.released.is_empty()
    }

    /// Messages lent and not yet released.
    pub(crate) fn lent(&self) -> usize {
        self.lent.len()
    }

    /// The connection is gone: nothing is owed either way.
    pub(crate) fn clear(&mut self) {
        *self = ByRef::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(addr: u64) -> Descriptor {
        Descriptor {
            addr,
            rkey: 1,
            len: 100,
        }
    }

    #[test]
    fn every_read_and_refusal_owes_one_rdone_and_tags_never_collide_with_call_ids() {
        let mut b = ByRef::default();
        let t1 = b.read(7 | crate::engine::wire::STREAM_ID_BIT, desc(0x1000));
        let t2 = b.read(7 | crate::engine::wire::STREAM_ID_BIT, desc(0x2000));
        assert_ne!(t1, t2);
        assert!(t1 & STREAM_READ_TAG != 0 && t2 & STREAM_READ_TAG != 0);
        assert_eq!(b.poll_read().map(|o| o.id), Some(t1));
        assert_eq!(b.poll_read().map(|o| o.id), Some(t2));
        assert!(!b.owes_rdone());
        b.refuse(desc(0x3000));
        assert_eq!(b.finished(t2), Some(7 | crate::engine::wire::STREAM_ID_BIT));
        assert_eq!(b.finished(t2), None, "a read ends once");
        assert_eq!(b.finished(t1), Some(7 | crate::engine::wire::STREAM_ID_BIT));
        let owed: Vec<u64> = std::iter::from_fn(|| b.poll_rdone()).collect();
        assert_eq!(owed, vec![0x3000, 0x2000, 0x1000]);
    }

    #[test]
    fn lent_messages_come_back_by_rdone_and_a_stray_rdone_frees_nothing() {
        let mut b = ByRef::default();
        b.lend(5, 0x1000);
        b.lend(5, 0x2000);
        b.lend(9, 0x3000);
        assert!(!b.on_rdone(0x4000), "never lent");
        assert!(b.on_rdone(0x2000));
        assert!(!b.on_rdone(0x2000), "released once");
        let freed: Vec<u64> = std::iter::from_fn(|| b.poll_released()).collect();
        assert_eq!(freed, vec![0x2000]);
        assert_eq!(b.lent(), 2, "the others stay lent");
    }
}
