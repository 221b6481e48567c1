//! Small unary answers that found every send slot of their connection in flight.
//! (A large one, above the connection's by-reference threshold, waits on its own
//! task as before: its encoding must not run on the receive loop, which is one of
//! the places that free slots and post what waits here.)
//!
//! Such an answer waits in the connection's queue, and the send completion that
//! frees a slot posts it ([`RcPeer::pump`]), instead of its call waiting for a slot
//! on a task of its own: a handler started inline would otherwise be spawned (a
//! task, and a wake-up of another worker) for nothing but that wait. At 256 calls
//! in flight on one connection that was 16 to 24 % of calls (rpc-bench 32 B x 256
//! on the soft provider, 2026-11-30), and none since.
//!
//! The queue holds at most one answer per call the client has in flight, which its
//! credit window bounds. A dead connection's answers are dropped with it.

use std::collections::VecDeque;

use super::{RcPeer, RcPeerState};
use crate::metadata::MetadataMap;
use crate::server::BoxMessage;
use crate::status::Status;

/// An answer as the handler gave it: metadata and message, or a status.
pub(super) type UnaryAnswer = Result<(MetadataMap, BoxMessage), Status>;

/// Answers waiting for a send slot, oldest first.
#[derive(Default)]
pub(super) struct WaitingAnswers(VecDeque<(u32, UnaryAnswer)>);

impl WaitingAnswers {
    pub(super) fn push(&mut self, id: u32, answer: UnaryAnswer) {
        self.0.push_back((id, answer));
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

impl RcPeer {
    /// Posts waiting answers while send slots last, oldest first.
    pub(super) fn post_waiting(st: &mut RcPeerState) {
        while !st.dead && !st.waiting.0.is_empty() {
            let Some(slot) = st.ring.acquire() else {
                return;
            };
            let (id, answer) = st.waiting.0.pop_front().expect("checked above");
            let RcPeerState { engine, ring, .. } = &mut *st;
            let r = answer
                .as_ref()
                .map(|(m, msg)| (m, &**msg))
                .map_err(Clone::clone);
            // `None` if the call ended meanwhile (cancelled): nothing to send.
            let t = engine.respond(id, r, ring.buf(&slot));
            st.post_or_release(slot, t);
        }
    }
}
