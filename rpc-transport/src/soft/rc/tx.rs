//! Output of one connection: frame heads (and small frames) encoded into a byte
//! buffer, payloads referenced where they live in registered memory, and both sent
//! together with one vectored write (`sendmsg`) per flush. No payload is staged: the
//! kernel copies it from the memory region into the socket.
//!
//! A partial write leaves the exact point it stopped at (in the head bytes or inside
//! a payload); the next flush continues from there.
//!
//! The queue holds at most about one [`CHUNK`] of unsent bytes (see `room`), so that
//! whatever is encoded next (a small Send behind a large Read response, an ACK) waits
//! for at most one chunk.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

use super::link::Link;
use crate::mr_buffer::MrBuffer;

/// Largest payload of one data frame, and the most unsent bytes the queue takes on.
///
/// Chosen by measurement: the `soft_copy` example (4 MiB Reads and Sends, one at a
/// time, two soft devices on loopback) with the chunk set to 16, 32, 64, 128 and
/// 256 KiB, best of 6 rounds each on a 2-core machine shared with other jobs (a raw TCP
/// loopback copy in the same runs: best 2.7 GB/s). Send: 2.95, 4.11, 4.22, 4.78,
/// 4.05 GB/s; Read: 1.50, 2.48, 1.66, 1.49, 1.95 GB/s. 16 KiB is clearly slower;
/// from 32 KiB on the differences are within the noise of the shared machine, while
/// the wait of a small message behind a chunk keeps doubling. 64 KiB is one loopback
/// TCP segment (MSS 65483), past the knee, and keeps that wait at ~30 µs at 2 GB/s.
pub(crate) const CHUNK: usize = 64 * 1024;
/// A payload frame is not started in less room than this (unless the rest of the
/// message is smaller): a sliver of a frame costs a head for few bytes.
const MIN_PIECE: usize = 4 * 1024;
/// Payloads up to this size are copied next to their head instead of referenced:
/// copying a few hundred bytes costs less than the reference (an `Arc` clone, a queue
/// entry, an iovec and `sendmsg` instead of `send`). Measured with the `soft_pingpong`
/// example (64 B round trips, p50 of two runs each): before this change 7.7/7.7 µs
/// (threads) and 9.0/8.7 µs (event-driven); referencing every payload 8.0/7.9 and
/// 9.7/9.2 µs; with this copy 7.8/7.7 and 8.7/8.7 µs.
pub(crate) const COPY_MAX: usize = 1024;
/// Iovecs per `sendmsg`.
const MAX_IOV: usize = 64;
/// Head bytes start with this capacity; they grow only while small frames pile up
/// behind a full socket (at most [`CHUNK`] plus one frame).
const START_CAP: usize = 4 * 1024;

/// A payload range in registered memory, sent after head byte `at`.
struct Ref {
    at: usize,
    ptr: *const u8,
    len: usize,
    _keep: Arc<MrBuffer>,
}

/// Encoded heads and referenced payloads not yet written to the socket.
pub(crate) struct TxBuf {
    /// Heads, small frames and inline payloads.
    pub(crate) buf: Vec<u8>,
    off: usize,
    refs: VecDeque<Ref>,
    ref_bytes: usize,
    /// Payload bytes placed into the peer directly, or lent for it to take, since the
    /// last flush (they count toward a pass's write budget as if written here).
    pub(crate) placed: usize,
    /// `buf.len()` when every unsent byte was a frame the reader need not be woken
    /// for ([`TxBuf::mark_quiet`]); anything queued since makes the flush ring again.
    quiet_at: Option<usize>,
}

// SAFETY: each `Ref` pointer is into a buffer the `Ref` keeps alive; it is read only by
// `sendmsg` under the QP lock, as a NIC would read registered memory.
unsafe impl Send for TxBuf {}

impl TxBuf {
    pub(crate) fn new() -> TxBuf {
        TxBuf {
            buf: Vec::with_capacity(START_CAP),
            off: 0,
            refs: VecDeque::new(),
            ref_bytes: 0,
            placed: 0,
            quiet_at: None,
        }
    }

    /// The unsent bytes are a frame that asks nothing of a sleeping reader before the
    /// next frame that does (an intermediate `READ_PLACED`): their flush publishes
    /// them without ringing its bell. The reader's request to be woken stays set, so
    /// the next flush that rings wakes it to read both.
    pub(crate) fn mark_quiet(&mut self) {
        self.quiet_at = Some(self.buf.len());
    }

    /// Whether flushing the unsent bytes should wake a sleeping reader.
    fn rings(&self) -> bool {
        self.quiet_at != Some(self.buf.len()) || !self.refs.is_empty()
    }

    /// Unsent bytes.
    pub(crate) fn queued(&self) -> usize {
        self.buf.len() - self.off + self.ref_bytes
    }

    /// Whether one more small frame may be encoded.
    pub(crate) fn has_room(&self) -> bool {
        self.queued() < CHUNK
    }

    /// How many payload bytes a data frame may carry now, out of `want` still to send
    /// (0: none; wait for a flush).
    pub(crate) fn room_for(&self, want: usize) -> usize {
        let room = CHUNK.saturating_sub(self.queued());
        if room < want.min(MIN_PIECE) {
            return 0;
        }
        want.min(room)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queued() == 0
    }

    /// Queues `len` bytes at `ptr` to follow the head bytes encoded so far.
    ///
    /// # Safety
    /// `ptr..ptr + len` must lie inside `keep`.
    pub(crate) unsafe fn push_ref(&mut self, ptr: *const u8, len: usize, keep: Arc<MrBuffer>) {
        if len == 0 {
            return;
        }
        self.ref_bytes += len;
        self.refs.push_back(Ref {
            at: self.buf.len(),
            ptr,
            len,
            _keep: keep,
        });
    }

    /// Writes what the link accepts; returns the bytes written (and placed since the
    /// last flush).
    pub(crate) fn flush(&mut self, link: &mut Link) -> io::Result<usize> {
        let mut total = std::mem::take(&mut self.placed);
        let ring = self.rings();
        while !self.is_empty() {
            if self.refs.is_empty() {
                // SAFETY: the iovec names the live unsent head bytes.
                match unsafe { link.write(&[iov(&self.buf[self.off..])], ring) } {
                    Ok(n) => {
                        let left = self.buf.len() - self.off;
                        self.off += n;
                        total += n;
                        if n < left {
                            break; // the socket is full
                        }
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            let mut iov = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; MAX_IOV];
            let k = self.iovecs(&mut iov);
            // SAFETY: the `k` iovecs point into `self.buf` and into buffers the refs
            // keep alive, all live for the call.
            let n = match unsafe { link.write(&iov[..k], ring) } {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            };
            let offered: usize = iov[..k].iter().map(|v| v.iov_len).sum();
            self.advance(n);
            total += n;
            if n < offered {
                break; // the socket is full
            }
        }
        if self.is_empty() {
            self.buf.clear();
            self.off = 0;
            self.quiet_at = None;
        } else if self.off > self.buf.capacity() / 2 {
            self.quiet_at = None;
            // Keep head bytes from creeping: move the unsent ones to the front.
            self.buf.drain(..self.off);
            for r in &mut self.refs {
                r.at -= self.off;
            }
            self.off = 0;
        }
        Ok(total)
    }

    /// The unsent bytes in order, as iovecs; returns how many were filled.
    fn iovecs(&self, out: &mut [libc::iovec; MAX_IOV]) -> usize {
        let mut k = 0;
        let mut pos = self.off;
        for r in &self.refs {
            if k + 2 > MAX_IOV {
                return k;
            }
            if r.at > pos {
                out[k] = iov(&self.buf[pos..r.at]);
                k += 1;
                pos = r.at;
            }
            out[k] = libc::iovec {
                iov_base: r.ptr as *mut libc::c_void,
                iov_len: r.len,
            };
            k += 1;
        }
        if pos < self.buf.len() && k < MAX_IOV {
            out[k] = iov(&self.buf[pos..]);
            k += 1;
        }
        k
    }

    /// Consumes `n` written bytes, in the order `iovecs` lists them.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let head_end = self.refs.front().map_or(self.buf.len(), |r| r.at);
            if self.off < head_end {
                let k = n.min(head_end - self.off);
                self.off += k;
                n -= k;
                continue;
            }
            let Some(r) = self.refs.front_mut() else {
                break;
            };
            let k = n.min(r.len);
            r.ptr = r.ptr.wrapping_add(k);
            r.len -= k;
            self.ref_bytes -= k;
            n -= k;
            if r.len == 0 {
                self.refs.pop_front();
            }
        }
    }
}

fn iov(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr() as *mut libc::c_void,
        iov_len: b.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    /// Head bytes and payloads from two buffers, through a socket that takes a few
    /// KiB at a time: every flush stops somewhere inside, and the next resumes there.
    #[test]
    fn partial_writes_resume_inside_heads_and_payloads() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx_sock = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut rx_sock, _) = l.accept().unwrap();
        tx_sock.set_nonblocking(true).unwrap();
        rx_sock.set_nonblocking(true).unwrap();
        // Small buffers (the kernel doubles these) keep the socket from taking the
        // whole transfer at once.
        socket2::SockRef::from(&tx_sock)
            .set_send_buffer_size(40_000)
            .unwrap();
        socket2::SockRef::from(&rx_sock)
            .set_recv_buffer_size(40_000)
            .unwrap();
        let a = Arc::new(MrBuffer::zeroed(4 << 20));
        let b = Arc::new(MrBuffer::zeroed(1000));
        let fill = |m: &MrBuffer, seed: usize| {
            let v: Vec<u8> = (0..m.len()).map(|i| ((i * 7 + seed) % 253) as u8).collect();
            // SAFETY: the buffer is this test's alone; `v` is exactly its length.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), m.as_ptr(), v.len()) };
            v
        };
        let (va, vb) = (fill(&a, 1), fill(&b, 2));
        let mut expect = Vec::new();
        let mut t = TxBuf::new();
        // head, 4 MiB payload, head, two payloads back to back, trailing bytes.
        t.buf.extend_from_slice(b"head-1");
        // SAFETY: each range is inside the buffer handed with it.
        unsafe { t.push_ref(a.as_ptr(), a.len(), a.clone()) };
        t.buf.extend_from_slice(b"head-2");
        // SAFETY: as above.
        unsafe { t.push_ref(b.as_ptr(), 600, b.clone()) };
        // SAFETY: as above.
        unsafe { t.push_ref(b.as_ptr().add(600), 400, b.clone()) };
        t.buf.extend_from_slice(b"tail");
        for part in [&b"head-1"[..], &va, b"head-2", &vb, b"tail"] {
            expect.extend_from_slice(part);
        }
        assert_eq!(t.queued(), expect.len());
        let mut link = Link::tcp(tx_sock);
        let mut got = Vec::with_capacity(expect.len());
        let mut partial = 0;
        let mut chunk = vec![0u8; 16 * 1024];
        while got.len() < expect.len() {
            let before = t.queued();
            let n = t.flush(&mut link).unwrap();
            assert_eq!(t.queued(), before - n);
            if n > 0 && !t.is_empty() {
                partial += 1;
            }
            // The reader takes at most 16 KiB per round, so the sender keeps finding
            // the socket full.
            match rx_sock.read(&mut chunk) {
                Ok(k) => got.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert!(t.is_empty());
        assert!(got == expect, "the stream differs from what was queued");
        assert!(
            partial > 10,
            "only {partial} partial writes: the test lost its point"
        );
    }
}
