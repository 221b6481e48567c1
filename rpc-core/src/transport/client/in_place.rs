//! Requests lent where their bytes lie. A large request whose encoding is mostly
//! `Bytes` fields (prost's `bytes::Bytes`, as `rpc-bench` and file transfers use)
//! is sent as a gather list: those `Bytes` are registered where they lie and the
//! server reads them from there, the rest (tags, lengths, short fields) travels
//! inline in the `REQ`. Encoding it into a lend region instead costs a copy of the
//! whole body on the caller's thread (`memmove`, 19 % of a 4 MiB echo's samples).
//!
//! Only on the soft provider, whose registration is a key-table entry; a NIC's pins
//! the pages and costs about the copy it saves, so verbs keep the lend region.
//! Only to a server that granted `GATHER_REQUESTS`.
//!
//! What the server can reach: each `Bytes` chunk exactly (its own registration, as
//! a window bound over a lend region is), from the `REQ` until its answer, when
//! the registration drops; the chunk stays alive meanwhile because the
//! registration holds a handle to it.

use rpc_transport::msg::{BytesLender, GatherWriter, Gathered};
use rpc_transport::ProtectionDomain;

use crate::engine::gather::MAX_GATHER_PARTS;
use crate::engine::CallHead;
use crate::server::EncodeMessage;
use crate::transport::rendezvous::gathered_len;

/// What a connection needs to lend request bodies in place.
#[derive(Clone)]
pub(crate) struct InPlace {
    pd: ProtectionDomain,
    /// Bytes of a frame: the list must fit beside the head, path and metadata.
    frame: usize,
}

impl InPlace {
    pub(crate) fn new(pd: ProtectionDomain, frame: usize) -> Self {
        InPlace { pd, frame }
    }

    /// `msg` as a gather list whose large `Bytes` are registered where they lie, if
    /// it has such and the list fits the `REQ` beside `head`; `None`: copy it.
    pub(crate) fn gather(&self, head: &CallHead<'_>, msg: &dyn EncodeMessage) -> Option<Gathered> {
        let lender = BytesLender(&self.pd);
        let mut w = GatherWriter::new(&lender, MAX_GATHER_PARTS);
        if !msg.encode_gathered(&mut w) {
            return None;
        }
        let g = w.finish()?;
        (head.encoded_len() + gathered_len(&g) <= self.frame).then_some(g)
    }
}

impl std::fmt::Debug for InPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InPlace")
            .field("frame", &self.frame)
            .finish()
    }
}
