//! The client side: one driver skeleton ([`conn`], [`channel`]) serving either
//! transport's connection state ([`link::Link`]): an RC connection ([`rc`]) or a
//! UD session ([`ud`]).
//!
//! The skeleton owns what both share: the connection's lock, its CQ and the driver
//! task that reaps it and sleeps until the engine's next timer (deadlines on RC;
//! deadlines and retransmissions on UD), the watcher of the handshake connection,
//! the callers waiting for room to send, the handle whose last clone closes the
//! connection, and the guard that cancels a call its caller dropped. A link owns
//! its engine and send slots and how it posts.
//!
//! Streaming calls (RC only) are in [`stream`]: the driver routes the engine's
//! per-call events (headers, message, writable, end) to each call's shared state,
//! a task per call pulls its request messages, and the caller reads the response
//! messages through `InboundMessages`.

mod backoff;
mod channel;
mod conn;
mod dial;
mod handle;
mod in_place;
mod link;
pub(crate) mod rc;
mod reap;
pub(crate) mod stream;
mod stream_shared;
pub(crate) mod ud;

use std::ops::Range;

use rpc_transport::msg::RecvSlot;
use tokio::sync::oneshot;

pub(crate) use channel::LinkChannel;

use crate::client::IncomingReply;
use crate::engine::Reply;
use crate::payload::Payload;
use crate::status::Status;

/// Where a call's reply goes: its caller's future.
pub(crate) type ReplySender = oneshot::Sender<Result<IncomingReply, Status>>;

/// Hands a call's outcome to its caller. A reply read in place needs `slot`, the
/// receive slot it is in, whose bytes from `offset` on are the frame the engine
/// read (the UD GRH comes before it).
pub(crate) fn deliver(
    reply: ReplySender,
    result: Result<Reply, Status>,
    slot: Option<RecvSlot>,
    offset: usize,
) {
    let shift = |r: Range<usize>| r.start + offset..r.end + offset;
    let r = result.map(|reply| match (reply, slot) {
        (Reply::InFrame { metadata, body }, Some(slot)) => IncomingReply {
            metadata,
            payload: Payload::from_slot(slot, shift(body)),
        },
        (Reply::InFrame { metadata, .. }, None) => IncomingReply {
            metadata,
            payload: Payload::from_vec(Vec::new()),
        },
        (Reply::Owned { metadata, body }, _) => IncomingReply {
            metadata,
            payload: Payload::from_vec(body),
        },
        (Reply::Shared { metadata, body }, _) => IncomingReply {
            metadata,
            payload: Payload::from_bytes(body),
        },
    });
    // A caller that went away drops the reply (and with it the slot).
    let _ = reply.send(r);
}
