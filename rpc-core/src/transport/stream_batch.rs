//! Coalescing a stream's small messages, for both sides' writers: the message a
//! writer already pulled, and whatever else its source has ready at that moment,
//! packed into one frame (see `engine::wire`, "Messages"). A writer never waits
//! for more: a lone message goes alone, at once.
//!
//! The batch is packed into the writer's own staging buffer, without the
//! connection's lock (encoding and polling the source run unlocked: a source may
//! itself take locks, as a bidi echo's inbound does), then copied into a send slot
//! under the lock in one step.

use std::task::{Context, Poll};

use crate::engine::wire::{self, BatchWriter, BATCH_ENTRY_HEAD, MSG_HEAD_LEN};
use crate::metadata::MetadataMap;
use crate::status::Status;
use crate::stream::BoxMessageSource;

/// A writer's staging frame and what it holds.
#[derive(Default)]
pub(crate) struct Staged {
    buf: Vec<u8>,
    len: usize,
    count: u32,
}

/// Why packing stopped, beyond a full frame or an exhausted credit.
pub(crate) enum Next {
    /// Nothing more is ready (the source will wake the writer).
    Nothing,
    /// The source made a message current that did not fit: it goes next.
    Message(usize),
    /// The source ended: the call's final status (server) or half-close/reset
    /// (client) follows the batch.
    End(Result<MetadataMap, Status>),
}

impl Staged {
    /// Whether a message of `len` bytes can go in a batch of a `frame`-byte frame
    /// (else it goes alone, in chunks, or is refused by the engine).
    pub(crate) fn fits(len: usize, frame: usize, max: usize) -> bool {
        len <= max && MSG_HEAD_LEN + BATCH_ENTRY_HEAD + len <= frame
    }

    /// Packs the current message of `source` (`len` bytes, which [`Staged::fits`])
    /// and then, while `credit` (in charges) lasts and the frame has room, every
    /// message the source has ready now. `max` is the largest message the peer
    /// takes.
    pub(crate) fn pack(
        &mut self,
        cx: &mut Context<'_>,
        source: &mut BoxMessageSource,
        first: usize,
        frame: usize,
        mut credit: i64,
        max: usize,
    ) -> Next {
        self.buf.resize(frame, 0);
        let mut batch = BatchWriter::new(&mut self.buf);
        let pushed = batch.push(first, |o| source.as_mut().encode_current(o));
        debug_assert!(pushed, "the first message fits");
        credit -= wire::charge(first) as i64;
        let next = loop {
            if credit <= 0 || batch.room() == 0 {
                break Next::Nothing;
            }
            match source.as_mut().poll_message(cx) {
                Poll::Pending => break Next::Nothing,
                Poll::Ready(None) => break Next::End(Ok(MetadataMap::new())),
                Poll::Ready(Some(Err(s))) => break Next::End(Err(s)),
                Poll::Ready(Some(Ok(len))) => {
                    if len > max || len > batch.room() {
                        break Next::Message(len);
                    }
                    batch.push(len, |o| source.as_mut().encode_current(o));
                    credit -= wire::charge(len) as i64;
                }
            }
        };
        self.count = batch.count();
        self.len = batch.finish();
        next
    }

    /// The packed frame, when it holds several messages.
    pub(crate) fn batch(&self) -> Option<&[u8]> {
        (self.count > 1).then(|| &self.buf[..self.len])
    }

    /// The one message packed, when it is alone (it then goes as a plain chunk).
    pub(crate) fn lone(&self) -> Option<&[u8]> {
        (self.count == 1).then(|| &self.buf[MSG_HEAD_LEN + BATCH_ENTRY_HEAD..self.len])
    }
}
