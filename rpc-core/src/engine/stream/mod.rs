//! Streaming calls on RC: the per-call state machines of both sides (see
//! [`crate::engine::wire`], "Streaming calls", for the frames and credits).
//!
//! They live beside the unary engines, which delegate to them only for frames and
//! ids of streaming calls: a unary call pays nothing for streams. What both sides
//! share is here: a message going out in fragments, one coming in, and the window
//! of message credits a receiver grants.

mod arrived;
mod by_ref;
pub(crate) mod client;
pub(crate) mod server;

use std::collections::VecDeque;

use crate::engine::wire::{self, Descriptor, MsgFrame, STREAM_WINDOW};
use crate::status::Status;
use bytes::Bytes;

pub use arrived::Arrived;

/// A message too long for one frame, sent as consecutive `MSG`s.
#[derive(Debug)]
pub(crate) struct Outgoing {
    body: Vec<u8>,
    sent: usize,
}

impl Outgoing {
    /// Writes the next `MSG` of the message into `out`; its length.
    pub(crate) fn write_next(&mut self, out: &mut [u8]) -> usize {
        let n = (out.len() - wire::MSG_HEAD_LEN).min(self.body.len() - self.sent);
        wire::write_msg_head(out, self.sent as u32, self.body.len() as u32);
        out[wire::MSG_HEAD_LEN..][..n].copy_from_slice(&self.body[self.sent..self.sent + n]);
        self.sent += n;
        wire::MSG_HEAD_LEN + n
    }

    pub(crate) fn done(&self) -> bool {
        self.sent == self.body.len()
    }
}

/// Writes the first `MSG` of a message of `len` bytes that `encode` writes: the whole
/// message in `out` when it fits (encoded in place), else its first chunk, the rest
/// kept in memory of its own (bounded by the caller's max message) for the next
/// `MSG`s. Returns the frame's length and the rest, if any.
pub(crate) fn write_message(
    len: usize,
    encode: impl FnOnce(&mut [u8]),
    out: &mut [u8],
) -> (usize, Option<Outgoing>) {
    let room = out.len() - wire::MSG_HEAD_LEN;
    if len <= room {
        wire::write_msg_head(out, 0, len as u32);
        encode(&mut out[wire::MSG_HEAD_LEN..wire::MSG_HEAD_LEN + len]);
        return (wire::MSG_HEAD_LEN + len, None);
    }
    let mut body = vec![0u8; len];
    encode(&mut body);
    let mut o = Outgoing { body, sent: 0 };
    let n = o.write_next(out);
    (n, Some(o))
}

/// A message arriving in `MSG`s.
#[derive(Debug, Default)]
pub(crate) struct Incoming {
    /// The message being reassembled, and its total length.
    partial: Option<(Vec<u8>, usize)>,
    /// From the first message by reference still being read on: messages in order
    /// of arrival, held back until every one before them is here.
    held: VecDeque<Held>,
}

#[derive(Debug)]
enum Held {
    /// Being read (the read's tag).
    Reading(u32),
    Ready(Arrived),
}

/// What one `MSG` frame did, beyond the whole messages it delivered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Received {
    /// Fine (a message may still be half received).
    Ok,
    /// A message by reference, charged: the caller starts its read and
    /// [`Incoming::hold`]s its place.
    ByRef(Descriptor),
    /// A message began without credit (a protocol violation).
    NoCredit,
    /// A message longer than the receiver's max message: its length.
    TooLong(usize),
    /// Not the next chunk (a gap, a second message begun mid-message, a lie), or a
    /// batch that does not add up.
    Malformed(&'static str),
}

impl Incoming {
    /// Takes one `MSG` frame, charging each message that begins to `window`; its
    /// whole messages go to `deliver`, in order (behind messages by reference still
    /// being read), a batch's together. `max` is the receiver's max message. A
    /// malformed batch delivers nothing; one with a message refused (too long,
    /// beyond the credit) delivers the messages before it.
    pub(crate) fn take(
        &mut self,
        frame: &[u8],
        max: usize,
        window: &mut Window,
        mut deliver: impl FnMut(Arrived),
    ) -> Received {
        let Incoming { partial, held } = self;
        let mut deliver = |m: Arrived| {
            if held.is_empty() {
                deliver(m);
            } else {
                held.push_back(Held::Ready(m));
            }
        };
        let (offset, total, chunk) = match wire::read_msg(frame) {
            Ok(MsgFrame::Chunk {
                offset,
                total,
                chunk,
            }) => (offset as usize, total as usize, chunk),
            Ok(MsgFrame::Batch(b)) => {
                if partial.is_some() {
                    return Received::Malformed("message batch inside a message");
                }
                // One copy out of the slot for the whole batch, handed on whole:
                // its messages are cut from it as the reader reads them.
                let mut count = 0;
                let mut refused = Received::Ok;
                for r in b.spans() {
                    if r.len() > max {
                        refused = Received::TooLong(r.len());
                        break;
                    }
                    if !window.arrived(wire::charge(r.len())) {
                        refused = Received::NoCredit;
                        break;
                    }
                    count += 1;
                }
                if count > 0 {
                    deliver(Arrived::batch(Bytes::copy_from_slice(b.entries()), count));
                }
                return refused;
            }
            Ok(MsgFrame::ByRef { total, desc }) => {
                if partial.is_some() {
                    return Received::Malformed("message by reference inside a message");
                }
                if total as usize > max {
                    return Received::TooLong(total as usize);
                }
                // Charged as its body: the window bounds what a slow reader holds
                // of the pool as it does inline messages.
                if !window.arrived(wire::charge(total as usize)) {
                    return Received::NoCredit;
                }
                return Received::ByRef(desc);
            }
            Err(e) => return Received::Malformed(e.0),
        };
        match partial {
            None => {
                if offset != 0 {
                    return Received::Malformed("stream message chunk without its start");
                }
                if total > max {
                    return Received::TooLong(total);
                }
                if !window.arrived(wire::charge(total)) {
                    return Received::NoCredit;
                }
                if chunk.len() == total {
                    deliver(Arrived::one(Bytes::copy_from_slice(chunk)));
                    return Received::Ok;
                }
                let mut buf = Vec::with_capacity(total);
                buf.extend_from_slice(chunk);
                *partial = Some((buf, total));
                Received::Ok
            }
            Some((buf, want)) => {
                if offset != buf.len() || total != *want {
                    return Received::Malformed("stream message chunk out of place");
                }
                buf.extend_from_slice(chunk);
                if buf.len() == *want {
                    let (buf, _) = partial.take().expect("present");
                    deliver(Arrived::one(Bytes::from(buf)));
                }
                Received::Ok
            }
        }
    }

    /// Keeps the place of the message by reference that read `tag` fetches.
    pub(crate) fn hold(&mut self, tag: u32) {
        self.held.push_back(Held::Reading(tag));
    }

    /// Whether messages wait behind one still being read (an end of the stream
    /// must wait for them too).
    pub(crate) fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// The read `tag` brought its message: it and those behind it that are here go
    /// to `deliver`, in order.
    pub(crate) fn read_done(&mut self, tag: u32, m: Bytes, mut deliver: impl FnMut(Arrived)) {
        if let Some(h) = self
            .held
            .iter_mut()
            .find(|h| matches!(h, Held::Reading(t) if *t == tag))
        {
            *h = Held::Ready(Arrived::one(m));
        }
        while let Some(Held::Ready(_)) = self.held.front() {
            if let Some(Held::Ready(m)) = self.held.pop_front() {
                deliver(m);
            }
        }
    }
}

/// A side's credit to send on one call, in charges (signed: a message may begin
/// with any credit above zero and take it below).
#[derive(Debug)]
pub(crate) struct SendCredit(i64);

impl Default for SendCredit {
    fn default() -> Self {
        SendCredit(i64::from(STREAM_WINDOW))
    }
}

impl SendCredit {
    /// Whether a message may begin.
    pub(crate) fn open(&self) -> bool {
        self.0 > 0
    }

    /// A message of `len` bytes began.
    pub(crate) fn spend(&mut self, len: usize) {
        self.0 -= wire::charge(len) as i64;
    }

    /// The peer granted `n`; whether the call could not send before and can now.
    pub(crate) fn grant(&mut self, n: u32) -> bool {
        let was = self.open();
        self.0 = self.0.saturating_add(i64::from(n));
        !was && self.open()
    }

    /// The credit left (at most the window; below zero after an overrun).
    pub(crate) fn left(&self) -> i64 {
        self.0
    }

    /// Spends the credit of a batch the caller packed (whole messages within
    /// `max`), if it covers it: each message begins with credit above zero. One
    /// pass over the batch (after the one that read it); nothing is spent if it
    /// does not check.
    pub(crate) fn spend_batch(&mut self, staged: &[u8], max: usize) -> Result<u32, Status> {
        let b = match wire::read_msg(staged) {
            Ok(MsgFrame::Batch(b)) => b,
            _ => return Err(Status::internal("not a message batch")),
        };
        let mut c = self.0;
        for r in b.spans() {
            if r.len() > max {
                return Err(Status::resource_exhausted(format!(
                    "stream message of {} bytes exceeds the limit of {max}",
                    r.len()
                )));
            }
            if c <= 0 {
                return Err(Status::failed_precondition(
                    "message batch beyond the call's credit",
                ));
            }
            c -= wire::charge(r.len()) as i64;
        }
        self.0 = c;
        Ok(b.count())
    }
}

/// The receiving side's message credits of one call: how many charges the peer
/// may still send, and how many the reader took since the last grant.
#[derive(Debug)]
pub(crate) struct Window {
    /// Charges the peer may still begin messages with (signed, as [`SendCredit`]).
    open: i64,
    /// Charges taken by the reader and not yet granted back.
    taken: u64,
    /// Taken charges that make a grant: a quarter of the window.
    grant_at: u64,
    /// What this window grants beyond the wire's [`STREAM_WINDOW`].
    beyond_open: u32,
}

impl Default for Window {
    fn default() -> Self {
        Window::new(STREAM_WINDOW)
    }
}

/// The largest stream window a receiver grants: HTTP/2's largest, 2^31 - 1.
pub(crate) const MAX_STREAM_WINDOW: u32 = i32::MAX as u32;

/// A receiver's stream window of `size` bytes as it applies: at least the wire's
/// [`STREAM_WINDOW`] (every sender counts from it at open), at most
/// [`MAX_STREAM_WINDOW`].
pub(crate) fn stream_window(size: u32) -> u32 {
    size.clamp(STREAM_WINDOW, MAX_STREAM_WINDOW)
}

impl Window {
    /// A window of `size` bytes of charges (see [`stream_window`]). The peer counts
    /// [`STREAM_WINDOW`] at open: the receiver grants the rest
    /// ([`Window::beyond_open`]) with a `CREDIT` as soon as it may.
    pub(crate) fn new(size: u32) -> Window {
        let size = stream_window(size);
        Window {
            open: i64::from(size),
            taken: 0,
            grant_at: u64::from(size / 4),
            beyond_open: size - STREAM_WINDOW,
        }
    }

    /// What this window grants beyond the wire's [`STREAM_WINDOW`], which the
    /// peer counts from at open: the first `CREDIT` of the call.
    pub(crate) fn beyond_open(&self) -> u32 {
        self.beyond_open
    }

    /// A message of `charge` began; `false` if the peer had no credit for it (a
    /// protocol violation).
    pub(crate) fn arrived(&mut self, charge: u64) -> bool {
        if self.open <= 0 {
            return false;
        }
        self.open -= charge as i64;
        true
    }

    /// The reader took messages of `charge` in all; returns a grant to send once
    /// a quarter of the window was taken (few `CREDIT` frames).
    pub(crate) fn taken(&mut self, charge: u64) -> Option<u32> {
        self.taken += charge;
        if self.taken < self.grant_at {
            return None;
        }
        let n = std::mem::take(&mut self.taken).min(u64::from(u32::MAX));
        self.open += n as i64;
        Some(n as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take_all(
        inc: &mut Incoming,
        w: &mut Window,
        f: &[u8],
        max: usize,
    ) -> (Received, Vec<Vec<u8>>) {
        let mut got = Vec::new();
        let r = inc.take(f, max, w, |a| got.extend(a.map(|m| m.to_vec())));
        (r, got)
    }

    #[test]
    fn a_message_comes_back_whole_from_its_chunks_and_lies_are_refused() {
        let msg: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut out = vec![0u8; 300];
        let (n, rest) = write_message(msg.len(), |b| b.copy_from_slice(&msg), &mut out);
        let mut rest = rest.expect("longer than a frame");
        let (mut inc, mut w) = (Incoming::default(), Window::default());
        assert_eq!(
            take_all(&mut inc, &mut w, &out[..n], 4096),
            (Received::Ok, vec![])
        );
        let mut got = vec![];
        while !rest.done() {
            let n = rest.write_next(&mut out);
            let (r, mut g) = take_all(&mut inc, &mut w, &out[..n], 4096);
            assert_eq!(r, Received::Ok);
            got.append(&mut g);
        }
        assert_eq!(got, vec![msg.clone()]);

        let (n, _) = write_message(msg.len(), |b| b.copy_from_slice(&msg), &mut out);
        let (r, _) = take_all(&mut Incoming::default(), &mut w, &out[..n], 999);
        assert_eq!(r, Received::TooLong(1000));
        // A chunk that does not start a message.
        wire::write_msg_head(&mut out, 8, 1000);
        let (r, _) = take_all(&mut Incoming::default(), &mut w, &out[..20], 4096);
        assert!(matches!(r, Received::Malformed(_)));
    }

    #[test]
    fn a_batch_with_a_message_refused_delivers_the_messages_before_it_in_order() {
        let mut f = vec![0u8; 256];
        let mut b = wire::BatchWriter::new(&mut f);
        for m in [vec![1u8; 10], vec![2; 10], vec![3; 100], vec![4; 10]] {
            assert!(b.push(m.len(), |o| o.copy_from_slice(&m)));
        }
        let n = b.finish();
        let mut w = Window::default();
        let (r, got) = take_all(&mut Incoming::default(), &mut w, &f[..n], 50);
        assert_eq!(r, Received::TooLong(100));
        assert_eq!(got, vec![vec![1u8; 10], vec![2; 10]]);
        // A batch whose messages all fit arrives whole, in order.
        let (r, got) = take_all(&mut Incoming::default(), &mut w, &f[..n], 100);
        assert_eq!((r, got.len()), (Received::Ok, 4));
        assert_eq!(got[3], vec![4u8; 10]);
    }

    #[test]
    fn a_window_of_bytes_grants_back_in_quarters_and_refuses_an_overrun() {
        let mut w = Window::default();
        let c = wire::charge(64 * 1024);
        let mut began = 0;
        while w.arrived(c) {
            began += 1;
        }
        assert_eq!(began, 16, "a 1 MiB window begins 16 messages of 64 KiB");
        let grants: Vec<u32> = (0..began).filter_map(|_| w.taken(c)).collect();
        assert_eq!(grants.len(), 4, "granted back in quarters");
        assert_eq!(grants.iter().map(|&g| u64::from(g)).sum::<u64>(), 16 * c);
        assert!(w.arrived(c));
        // Small messages: thousands fit the same window.
        let mut w = Window::default();
        let small = (0..).take_while(|_| w.arrived(wire::charge(32))).count();
        assert_eq!(small, (STREAM_WINDOW as usize).div_ceil(64));
    }
}
