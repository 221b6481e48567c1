//! The memory of this requester's messages that the peer may access itself, held
//! alive until the peer is done with it: the destinations of Reads it may place bytes
//! into (`READ_REQ_PLACE`, see `shm::direct`), and the sources of Send and Write
//! segments it may take bytes from (`SEND_LENT`, `WRITE_LENT`). One [`Placing`] holds
//! each kind: a Read is done with at its last response segment, a lent segment once
//! its message is acknowledged.
//!
//! The peer writes those bytes without asking this side, so the memory must outlive
//! every write it may still make, not only the Read's completion: a WQE flushed by
//! ERR completes at once, while the peer may be copying its response. A destination
//! is let go when the peer says it is done with it (the Read's `LAST` response
//! segment, or a NAK that ends its responder), or when the peer can no longer write
//! (its connection ended). A QP destroyed while a peer may still be writing keeps
//! those buffers until that peer closes its end of the connection
//! (`soft::held_for_peer`) rather than let a later mapping at the same address
//! receive the peer's bytes, even past its device's drop; so does a QP moved to
//! RESET. A connection this side ends on a fault lets them go (its peer broke the
//! protocol or closed). A holder dropped any other way keeps them mapped for the
//! life of the process (logged): no path is known to do so; it is the safe default. That protects
//! against an honest peer finishing a transfer this side gave up on; a hostile peer
//! that passed the probe may write anywhere in this process anyway (same user,
//! ptrace access), which is why the probe is the gate.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::mr_buffer::MrBuffer;

use super::super::held_for_peer::keep_mapped;
use super::super::wire::{seq_lt, SEQ_MASK};

/// Buffers held, by message sequence number, oldest first.
#[derive(Default)]
pub(crate) struct Placing {
    held: VecDeque<(u32, Arc<MrBuffer>)>,
}

impl Placing {
    /// Holds `buf` until the message `seq` is over (a message of several lent
    /// segments holds one buffer per segment). A message sent again (after a NAK
    /// rewound the send queue, the peer executes nothing after it until then) lets go
    /// of what was held for the numbers after it.
    pub(crate) fn hold(&mut self, seq: u32, buf: Arc<MrBuffer>) {
        while self.held.back().is_some_and(|b| seq_lt(seq, b.0)) {
            self.held.pop_back();
        }
        self.held.push_back((seq, buf));
    }

    /// The buffers held now.
    #[cfg(test)]
    pub(crate) fn buffers(&self) -> impl Iterator<Item = &Arc<MrBuffer>> {
        self.held.iter().map(|h| &h.1)
    }

    /// Whether the Read `seq` offered its destination.
    pub(crate) fn holds(&self, seq: u32) -> bool {
        self.held.iter().any(|h| h.0 == seq)
    }

    /// The peer is done with the message `seq`, and so (it executes requests in
    /// order) with every earlier one.
    pub(crate) fn release_through(&mut self, seq: u32) {
        while self
            .held
            .front()
            .is_some_and(|f| f.0 == seq || seq_lt(f.0, seq))
        {
            self.held.pop_front();
        }
    }

    /// The peer acknowledged every message before `ack` (a cumulative ACK): it has
    /// executed them, so it took their lent bytes.
    pub(crate) fn release_acked(&mut self, ack: u32) {
        self.release_through(ack.wrapping_sub(1) & SEQ_MASK);
    }

    /// The peer will touch none of them any more.
    pub(crate) fn release_all(&mut self) {
        self.held.clear();
    }

    /// Every buffer held, handed over (to be kept until the peer is gone:
    /// `held_for_peer`).
    pub(crate) fn take_all(&mut self) -> impl ExactSizeIterator<Item = Arc<MrBuffer>> + '_ {
        self.held.drain(..).map(|(_, b)| b)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

impl Drop for Placing {
    fn drop(&mut self) {
        keep_mapped(
            self.take_all(),
            "soft RC QP gone while its peer (placing Read responses or taking lent bytes)",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_follows_request_order_and_resends_replace() {
        let buf = Arc::new(MrBuffer::zeroed(8));
        let mut p = Placing::default();
        for seq in [0xff_fffe, 0xff_ffff, 0, 1] {
            p.hold(seq, buf.clone());
        }
        p.release_through(0xff_ffff); // across the 24-bit wrap
        assert!(!p.holds(0xff_fffe) && !p.holds(0xff_ffff));
        assert!(p.holds(0) && p.holds(1));
        p.hold(0, buf.clone()); // sent again from 0 after an RNR NAK
        assert_eq!(p.len(), 2, "1 is let go, the first 0 stays with the second");
        p.release_through(0);
        assert_eq!(p.len(), 0);
        p.hold(2, buf.clone());
        p.release_all();
        assert_eq!(Arc::strong_count(&buf), 1);
    }
}
