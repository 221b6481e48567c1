//! Input of one connection: frame heads are read into a small buffer, payloads go
//! straight to where they belong.
//!
//! Once a head is decoded, the handler decides where its payload goes (a posted
//! receive, the target of a Write, the local memory of a Read) after making every
//! check, or that it goes nowhere; the payload is then read with `readv` into that
//! memory, together with the next few head bytes into the buffer. Only bytes that a
//! read brought in ahead of time (with a previous frame's head) are copied out of the
//! buffer; for a large payload that is at most [`LOOKAHEAD`] bytes per frame. Payloads
//! under [`DIRECT_MIN`] arrive in batches with their heads and are copied out: one
//! `read` for many small frames costs less than a `readv` each.
//!
//! A shared-memory ring needs none of that: it is read in place. Each head is copied
//! off the ring onto the stack (at most [`LOOKAHEAD`] bytes) and each payload straight
//! into its destination, so every byte is copied once, however many frames wait.
//! Before, a read into the buffer took whatever the ring held, and with messages
//! queued behind each other the payloads among it were copied twice (measured: 4 KiB
//! echoes × 16 in flight, 188-255 k -> 236-273 k calls/s, CPU per call 7.2-9.6 ->
//! 6.9-7.9 µs).

use super::super::pieces::Pieces;
use super::super::shm::records::Window;
use super::super::shm::Inbox;
use super::super::wire::{self, Body, Head, WireError, HDR_LEN, MAX_EXT};
use super::link::Link;

/// Size of the head buffer at first. Small frames are read (and copied out) in
/// batches of up to the buffer's size, so a burst of small messages costs one `read`;
/// a read that fills it doubles it, up to [`MAX_CAP`] (many small messages in flight:
/// 256 calls of 1 KiB are ~280 KB). Growth is an allocation per doubling, never per
/// message; large payloads never pass through it.
const START_CAP: usize = 16 * 1024;
const MAX_CAP: usize = 256 * 1024;
/// Payloads from this size on are read directly into their destination.
const DIRECT_MIN: usize = 2 * 1024;
/// What a direct read takes in after the payload: one head of any opcode.
const LOOKAHEAD: usize = HDR_LEN + MAX_EXT;

/// Where a frame's payload goes; decided by the handler from the head.
pub(crate) trait Handler {
    /// A head arrived; fill `into` with the payload's destination (or leave it empty
    /// to discard the payload).
    fn head(&mut self, h: &Head, into: &mut Pieces) -> Result<(), super::Fault>;
    /// The whole payload of `h` has been taken off the stream.
    fn end(&mut self, h: &Head) -> Result<(), super::Fault>;
    /// The stream carried bytes that are not a frame.
    fn malformed(&mut self, e: WireError);
    /// The pass has done its share of work off the stream (lent bytes taken): stop
    /// before the next head, leaving it for the next pass ([`RxBuf::holds_frames`]).
    fn sated(&self) -> bool {
        false
    }
}

/// How a read pass ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Nothing more to read now.
    Drained,
    /// The byte budget ran out; more may be waiting.
    Budget,
    /// The peer closed the connection.
    Eof,
}

/// A frame whose payload is still arriving.
struct Current {
    head: Head,
    left: usize,
}

/// Received bytes not yet decoded, and the frame being received.
pub(crate) struct RxBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    cur: Option<Current>,
    sink: Pieces,
    /// The last payload was large: until a small one comes, heads are read
    /// [`LOOKAHEAD`] bytes at a time, so that a read for the next head does not pull
    /// the next chunk's payload into the buffer (to be copied out). Measured: with
    /// bulk reset by every payload-less head (the ACKs and Read requests that
    /// interleave with bulk data), most Read response payloads of rpc-bench's 4 MiB
    /// calls were read into the buffer and copied out (12% of all CPU samples).
    bulk: bool,
    /// Bytes the last [`RxBuf::receive`] read from the socket.
    last_read: usize,
    /// The last [`RxBuf::receive`] stopped with bytes undecoded ([`Handler::sated`]).
    stopped_early: bool,
    /// Ring records have been queueing up (one waited right behind another): a pass
    /// reads on into the records after the first ([`Inbox::extend`]). Otherwise a
    /// pass stops after its first record and asks to come back (`Stop::Budget`):
    /// looking for the next record loads a line the writer's core holds (it cleared
    /// that slot last), about 100 ns, and a lone message's completion waited for it.
    /// `rpc-bench` 32 B echoes, alternating rounds of two builds: 1 in flight p50
    /// 1.95-1.99 µs always stopping, 2.00-2.04 µs always reading on; but 256 in
    /// flight 615-817 k calls/s always stopping, 722-927 k reading on.
    ring_queued: bool,
    /// The last ring pass stopped after its first record without looking further.
    ring_stopped_short: bool,
}

impl RxBuf {
    pub(crate) fn new() -> RxBuf {
        RxBuf {
            buf: vec![0u8; START_CAP],
            start: 0,
            end: 0,
            cur: None,
            sink: Pieces::discard(),
            bulk: false,
            last_read: 0,
            stopped_early: false,
            ring_queued: false,
            ring_stopped_short: false,
        }
    }

    /// Stops writing the frame in progress anywhere (its destination is being
    /// flushed or the QP reset); the rest of its payload is still consumed.
    pub(crate) fn discard_current(&mut self) {
        self.sink.clear();
    }

    /// Reads and handles frames until the socket is drained, `budget` bytes were
    /// read, or the stream ends. An I/O error or a malformed frame is `Err`.
    pub(crate) fn receive(
        &mut self,
        sock: &mut Link,
        budget: usize,
        h: &mut impl Handler,
    ) -> Result<Stop, super::Fault> {
        let mut read = 0usize;
        self.stopped_early = false;
        let r = if sock.ring_input().is_some() {
            self.receive_ring(sock, budget, h, &mut read)
        } else {
            self.receive_counted(sock, budget, h, &mut read)
        };
        self.last_read = read;
        r
    }

    /// Whether bytes already read wait to be decoded (a pass stopped early: see
    /// [`Handler::sated`]); the QP must be visited again for them, as the socket or
    /// ring that brought them may not say so.
    pub(crate) fn holds_frames(&self) -> bool {
        self.stopped_early
    }

    /// Bytes the last [`RxBuf::receive`] read from the socket.
    pub(crate) fn last_read(&self) -> usize {
        self.last_read
    }

    fn receive_counted(
        &mut self,
        sock: &mut Link,
        budget: usize,
        h: &mut impl Handler,
        read: &mut usize,
    ) -> Result<Stop, super::Fault> {
        // A read returned less than it asked for: the socket is empty for now, so
        // handle what arrived and stop without another (failing) read.
        let mut drained = false;
        loop {
            if let Some(c) = self.cur.as_mut() {
                let have = (self.end - self.start).min(c.left);
                if have > 0 {
                    if !self.sink.is_discard() {
                        self.sink.put(&self.buf[self.start..self.start + have]);
                    }
                    self.start += have;
                    c.left -= have;
                }
                if c.left == 0 {
                    self.finish(h)?;
                    continue;
                }
                if drained {
                    return Ok(Stop::Drained);
                }
                if *read >= budget {
                    return Ok(Stop::Budget);
                }
                if (c.left >= DIRECT_MIN || self.bulk) && !self.sink.is_discard() {
                    self.bulk = true;
                    match self.read_direct(sock)? {
                        None => return Ok(Stop::Drained),
                        Some((0, _)) => return Ok(Stop::Eof),
                        Some((n, short)) => {
                            *read += n;
                            drained = short;
                            continue;
                        }
                    }
                }
            } else {
                if h.sated() && self.start != self.end {
                    self.stopped_early = true;
                    return Ok(Stop::Budget);
                }
                match wire::decode_head(&self.buf[self.start..self.end]) {
                    Ok(Some((head, used))) if head.body == Body::ShmSwitch => {
                        self.start += used;
                        // Nothing may follow it on TCP: the rest is in the ring.
                        if self.start != self.end {
                            h.malformed(WireError::Reserved);
                            return Err(super::Fault::Broken);
                        }
                        sock.switch_input()?;
                        return self.receive_ring(sock, budget, h, read);
                    }
                    Ok(Some((head, used))) => {
                        self.start += used;
                        // Heads without payload (ACKs, Read requests) interleave with
                        // bulk data and say nothing about the next payload's size.
                        if head.len as usize >= DIRECT_MIN {
                            self.bulk = true;
                        } else if head.len > 0 {
                            self.bulk = false;
                        }
                        self.begin(head, h)?;
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        h.malformed(e);
                        return Err(super::Fault::Broken);
                    }
                }
                if drained {
                    return Ok(Stop::Drained);
                }
                if *read >= budget {
                    return Ok(Stop::Budget);
                }
            }
            match self.fill(sock)? {
                None => return Ok(Stop::Drained),
                Some((0, _)) => return Ok(Stop::Eof),
                Some((n, short)) => {
                    *read += n;
                    drained = short;
                }
            }
        }
    }

    /// Hands a decoded head to the handler, which says where its payload goes; the
    /// frame is current until its payload has all arrived, and one without payload
    /// ends at once.
    fn begin(&mut self, head: Head, h: &mut impl Handler) -> Result<(), super::Fault> {
        self.sink.clear();
        h.head(&head, &mut self.sink)?;
        if head.len == 0 {
            self.sink.clear();
            return h.end(&head);
        }
        let left = head.len as usize;
        self.cur = Some(Current { head, left });
        Ok(())
    }

    /// The current frame's payload has all arrived.
    fn finish(&mut self, h: &mut impl Handler) -> Result<(), super::Fault> {
        let c = self.cur.take().expect("a frame is current");
        self.sink.clear();
        h.end(&c.head)
    }

    /// [`RxBuf::receive`] on a ring: heads are copied out of the ring one at a time
    /// (a few dozen bytes, onto the stack) and payloads straight into their
    /// destination, so each byte is copied once and nothing waits in the buffer.
    fn receive_ring(
        &mut self,
        sock: &mut Link,
        budget: usize,
        h: &mut impl Handler,
        read: &mut usize,
    ) -> Result<Stop, super::Fault> {
        let mut gone = false;
        loop {
            let inbox = sock.ring_input().expect("called for ring input");
            let broken = |_| super::Fault::Broken;
            let mut window = inbox.window().map_err(broken)?;
            if std::mem::take(&mut self.ring_stopped_short) && window.len() > 0 {
                self.ring_queued = true;
            }
            // Window positions: `at` is also the bytes this pass took.
            let mut at = 0;
            let stop = loop {
                let tail = window.len();
                if let Some(c) = self.cur.as_mut() {
                    let have = (tail - at).min(c.left as u64) as usize;
                    if have > 0 {
                        if !self.sink.is_discard() {
                            copy_to_sink(inbox, &window, at, have, &mut self.sink);
                        }
                        at += have as u64;
                        c.left -= have;
                    }
                    if c.left > 0 {
                        if inbox.extend(&mut window).map_err(broken)? {
                            continue;
                        }
                        break Stop::Drained;
                    }
                    self.finish(h)?;
                    continue;
                }
                if at == tail {
                    if !self.ring_queued {
                        self.ring_stopped_short = at > 0;
                        break Stop::Drained;
                    }
                    if inbox.extend(&mut window).map_err(broken)? {
                        continue;
                    }
                    self.ring_queued = false;
                    break Stop::Drained;
                }
                if at as usize >= budget {
                    break Stop::Budget;
                }
                if h.sated() {
                    self.stopped_early = true;
                    break Stop::Budget;
                }
                let mut head = [0u8; LOOKAHEAD];
                let k = ((tail - at) as usize).min(LOOKAHEAD);
                inbox.copy_at(&window, at, &mut head[..k]);
                match wire::decode_head(&head[..k]) {
                    // `SHM_SWITCH` in the ring is the handler's to refuse.
                    Ok(Some((head, used))) => {
                        at += used as u64;
                        self.begin(head, h)?;
                    }
                    // A head split across records: the rest is in the next one.
                    Ok(None) if inbox.extend(&mut window).map_err(broken)? => {}
                    Ok(None) => break Stop::Drained,
                    Err(e) => {
                        h.malformed(e);
                        return Err(super::Fault::Broken);
                    }
                }
            };
            // A full window, or a pass that stopped short, may have left records for
            // the next pass.
            let stop = if stop == Stop::Drained && (window.is_full() || self.ring_stopped_short) {
                Stop::Budget
            } else {
                stop
            };
            let found = at != 0;
            let wanted = found && inbox.consume_to(&window, at);
            *read += at as usize;
            let gone_now = sock.after_ring_pass(wanted, found)?;
            if stop == Stop::Budget || found {
                return Ok(stop);
            }
            if gone {
                return Ok(Stop::Eof);
            }
            if !gone_now {
                return Ok(Stop::Drained);
            }
            // The peer is gone: what it published before it died is read first (one
            // more pass).
            gone = true;
        }
    }

    /// Reads into the free tail of the buffer (compacting it first). `None`: nothing
    /// to read now; `Some((n, short))`: `n` bytes, `short` if fewer than asked for.
    fn fill(&mut self, sock: &mut Link) -> Result<Option<(usize, bool)>, super::Fault> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let cap = self.buf.len();
        let mut free = cap - self.end;
        if self.bulk && self.cur.is_none() {
            free = free.min(LOOKAHEAD);
        }
        // SAFETY: the iovec names the free tail of the buffer, live for the call.
        let n = unsafe { sock.read(&mut [iov_of(&mut self.buf[self.end..self.end + free])])? };
        Ok(n.map(|n| {
            self.end += n;
            if n == free && cap < MAX_CAP && !self.bulk {
                self.buf.resize(cap * 2, 0);
            }
            (n, n < free)
        }))
    }

    /// Reads the current payload into its destination and the next head into the
    /// (empty) buffer with one `readv`.
    fn read_direct(&mut self, sock: &mut Link) -> Result<Option<(usize, bool)>, super::Fault> {
        debug_assert_eq!(self.start, self.end);
        self.start = 0;
        self.end = 0;
        let mut iov = [iov_of(&mut []); super::super::device::MAX_SGE + 1];
        let k = self.sink.iovecs(&mut iov[..super::super::device::MAX_SGE]);
        let left = self.sink.left();
        iov[k] = iov_of(&mut self.buf[..LOOKAHEAD]);
        // SAFETY: every iovec names writable memory that is live for the call: the head
        // buffer, or checked ranges of registered memory that the sink keeps alive.
        let Some(n) = (unsafe { sock.read(&mut iov[..=k])? }) else {
            return Ok(None);
        };
        let to_sink = n.min(left);
        self.sink.advance(to_sink);
        if let Some(c) = self.cur.as_mut() {
            c.left -= to_sink;
        }
        self.end = n - to_sink;
        Ok(Some((n, n < left + LOOKAHEAD)))
    }
}

/// Copies `n` bytes at position `at` of `window` into the sink's first `n` bytes.
fn copy_to_sink(inbox: &Inbox, window: &Window, at: u64, n: usize, sink: &mut Pieces) {
    sink.fill_with(n, |off, dst| inbox.copy_at(window, at + off as u64, dst));
}

fn iov_of(b: &mut [u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: b.len(),
    }
}
