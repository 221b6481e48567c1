//! Streaming calls on RC: the per-call state machines of both sides (see
//! [`crate::engine::wire`], "Streaming calls", for the frames and credits).
//!
//! They live beside the unary engines, which delegate to them only for frames and
//! ids of streaming calls: a unary call pays nothing for streams. What both sides
//! share is here: a message going out in fragments, one coming in, and the window
//! of message credits a receiver grants.

pub(crate) mod client;
pub(crate) mod server;

use crate::engine::wire::{self, STREAM_WINDOW};

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
}

/// What one `MSG` did to the message being received.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Chunk {
    /// A whole message.
    Message(Vec<u8>),
    /// More `MSG`s of this message follow.
    Partial,
    /// Longer than the receiver's max message: its length.
    TooLong(usize),
    /// Not the next chunk (a gap, a second message begun mid-message, a lie).
    Malformed(&'static str),
}

impl Incoming {
    /// Takes one `MSG` frame; `max` is the receiver's max message.
    pub(crate) fn take(&mut self, frame: &[u8], max: usize) -> Chunk {
        let (offset, total, chunk) = match wire::read_msg(frame) {
            Ok(m) => m,
            Err(e) => return Chunk::Malformed(e.0),
        };
        let (offset, total) = (offset as usize, total as usize);
        match &mut self.partial {
            None => {
                if offset != 0 {
                    return Chunk::Malformed("stream message chunk without its start");
                }
                if total > max {
                    return Chunk::TooLong(total);
                }
                if chunk.len() == total {
                    return Chunk::Message(chunk.to_vec());
                }
                let mut buf = Vec::with_capacity(total);
                buf.extend_from_slice(chunk);
                self.partial = Some((buf, total));
                Chunk::Partial
            }
            Some((buf, want)) => {
                if offset != buf.len() || total != *want {
                    return Chunk::Malformed("stream message chunk out of place");
                }
                buf.extend_from_slice(chunk);
                if buf.len() < *want {
                    return Chunk::Partial;
                }
                let (buf, _) = self.partial.take().expect("present");
                Chunk::Message(buf)
            }
        }
    }
}

/// The receiving side's message credits of one call: how many messages the peer may
/// still send, and how many the reader took since the last grant.
#[derive(Debug)]
pub(crate) struct Window {
    /// Messages the peer may still send.
    open: u32,
    /// Messages taken by the reader and not yet granted back.
    taken: u32,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            open: STREAM_WINDOW,
            taken: 0,
        }
    }
}

impl Window {
    /// A message arrived; `false` if the peer had no credit for it (a protocol
    /// violation).
    pub(crate) fn arrived(&mut self) -> bool {
        if self.open == 0 {
            return false;
        }
        self.open -= 1;
        true
    }

    /// The reader took a message; returns a grant to send, once half the window was
    /// taken (fewer `CREDIT` frames than messages).
    pub(crate) fn taken(&mut self) -> Option<u32> {
        self.taken += 1;
        if self.taken < STREAM_WINDOW / 2 {
            return None;
        }
        Some(self.grant())
    }

    fn grant(&mut self) -> u32 {
        let n = std::mem::take(&mut self.taken);
        self.open += n;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_comes_back_whole_from_its_chunks_and_lies_are_refused() {
        let msg: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut out = vec![0u8; 300];
        let (n, rest) = write_message(msg.len(), |b| b.copy_from_slice(&msg), &mut out);
        let mut rest = rest.expect("longer than a frame");
        let mut inc = Incoming::default();
        assert_eq!(inc.take(&out[..n], 4096), Chunk::Partial);
        let mut last = Chunk::Partial;
        while !rest.done() {
            let n = rest.write_next(&mut out);
            last = inc.take(&out[..n], 4096);
        }
        assert_eq!(last, Chunk::Message(msg.clone()));

        let (n, _) = write_message(msg.len(), |b| b.copy_from_slice(&msg), &mut out);
        assert_eq!(
            Incoming::default().take(&out[..n], 999),
            Chunk::TooLong(1000)
        );
        // A chunk that does not start a message.
        wire::write_msg_head(&mut out, 8, 1000);
        assert!(matches!(
            Incoming::default().take(&out[..20], 4096),
            Chunk::Malformed(_)
        ));
    }

    #[test]
    fn a_window_grants_back_in_halves_and_refuses_an_overrun() {
        let mut w = Window::default();
        for _ in 0..STREAM_WINDOW {
            assert!(w.arrived());
        }
        assert!(!w.arrived(), "no credit left");
        let grants: Vec<u32> = (0..STREAM_WINDOW).filter_map(|_| w.taken()).collect();
        assert_eq!(grants, vec![STREAM_WINDOW / 2, STREAM_WINDOW / 2]);
        assert!(w.arrived());
    }
}
