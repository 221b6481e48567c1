//! A large response lent where its bytes lie: the bytes a handler returns that it
//! received (a request body echoed, forwarded or sliced) are read by the client
//! from the server's read pool through a window bound over exactly their range,
//! beside inline runs for the rest, instead of being copied into a lend region.
//! `engine::gather` has the frame; `docs/large-messages.md` the rules.

use rpc_transport::msg::{GatherPart, GatherWriter, Gathered, Keep, SendSlot};

use super::{RcPeer, RcPeerState};
use crate::engine::gather::{gather_len, ByRef, MAX_GATHER_PARTS};
use crate::engine::wire::RESPONSE_HEAD_LEN;
use crate::metadata::MetadataMap;
use crate::server::EncodeMessage;
use crate::transport::lock;
use crate::transport::rendezvous::{gathered_len, gathered_pieces};

impl RcPeer {
    /// `msg` (`len` bytes) as a gather list, if the connection lends through
    /// windows, the message references bytes the server's read pool holds, and the
    /// list fits one frame beside `metadata`; `None`: copy it as before.
    pub(super) fn gather(
        &self,
        len: usize,
        metadata: &MetadataMap,
        msg: &dyn EncodeMessage,
    ) -> Option<Gathered> {
        let (pool, frame) = {
            let mut st = lock(&self.state);
            let st = &mut *st;
            let rdv = st.rdv.as_mut()?;
            if st.dead || !st.engine.response_by_ref(len) || !rdv.windows.lends_shared() {
                return None;
            }
            (rdv.reader.pool().clone(), st.engine.frame_size())
        };
        // Nothing received is held as `Bytes`: nothing to find, no encode pass.
        if !pool.has_shared() {
            return None;
        }
        let mut w = GatherWriter::new(&pool, MAX_GATHER_PARTS);
        if !msg.encode_gathered(&mut w) {
            return None;
        }
        let g = w.finish()?;
        (RESPONSE_HEAD_LEN + metadata.encoded_len() + gathered_len(&g) <= frame).then_some(g)
    }
}

impl RcPeerState {
    /// Answers call `id` with `g` in `slot`: binds a window over each reference
    /// (posted ahead of the frame), keeps them lent until the client's `RDONE`
    /// (or `CANCEL`, or the connection's end), and posts the `RESP`. `Err` gives
    /// both back when no window room is free (try again after a completion).
    pub(super) fn respond_gathered(
        &mut self,
        id: u32,
        metadata: &MetadataMap,
        g: Gathered,
        slot: SendSlot,
    ) -> Result<(), (Gathered, SendSlot)> {
        let Some(rdv) = &mut self.rdv else {
            self.ring.release(slot);
            return Ok(());
        };
        let refs = g.parts.iter().filter_map(|p| match p {
            GatherPart::Ref {
                region: Keep::Pool(region),
                addr,
                len,
            } => Some((region.clone(), *addr, *len)),
            // The read pool's lender keeps pool regions only.
            GatherPart::Ref { .. } | GatherPart::Inline(_) => None,
        });
        if !rdv.windows.can_lend_shared(refs.clone().count()) {
            return Err((g, slot));
        }
        let mut rkeys = Vec::with_capacity(MAX_GATHER_PARTS);
        let lent = match rdv.windows.lend_shared(refs, &mut rkeys) {
            Ok(l) => l,
            Err(why) => {
                tracing::debug!(%why, "server cannot lend; dropping connection");
                self.dead = true;
                self.ring.release(slot);
                return Ok(());
            }
        };
        let mut rkeys = rkeys.into_iter();
        let pieces = gathered_pieces(&g, |_| rkeys.next().expect("one rkey per reference"));
        debug_assert!(gather_len(&pieces) <= self.engine.frame_size());
        let RcPeerState {
            engine, ring, rdv, ..
        } = self;
        let rdv = rdv.as_mut().expect("checked above");
        let sent = engine.respond_by_ref(id, metadata, ByRef::Gather(&pieces), ring.buf(&slot));
        let t = match (sent, lent) {
            (Some((t, true)), Some(l)) => {
                l.announced();
                rdv.lent.insert(id, l);
                Some(t)
            }
            // Not lent after all (a status went, or the call is over): the windows
            // are invalidated like any other.
            (other, l) => {
                if let Some(l) = l {
                    self.unlend(l);
                }
                other.map(|(t, _)| t)
            }
        };
        self.post_or_release(slot, t);
        Ok(())
    }
}
