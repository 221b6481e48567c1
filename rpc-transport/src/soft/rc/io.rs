//! Per-connection byte buffers.
//!
//! Frames are decoded straight out of `RxBuf` and encoded straight into `TxBuf`;
//! one `read` and one `send` per progress pass move everything that is ready. Both
//! start at 8 KiB, which small messages never outgrow, and double up to 1 MiB while
//! large transfers keep them full (a frame larger than the receive buffer fills it,
//! which doubles it), so that a bulk transfer moves up to a megabyte per syscall like a
//! raw TCP stream. A connection that grew keeps its buffers (growth is an allocation
//! per doubling, not per message). They started at two frames (~64 KiB each) before:
//! 128 KiB of heap per connection that glibc kept resident after a server's
//! connections closed.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use super::super::wire::MAX_FRAME;

/// Received bytes not yet decoded.
pub(crate) struct RxBuf {
    buf: Vec<u8>,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

const START_CAP: usize = 8 * 1024;
const MAX_CAP: usize = 1 << 20;

impl RxBuf {
    pub(crate) fn new() -> RxBuf {
        RxBuf {
            buf: vec![0u8; START_CAP],
            start: 0,
            end: 0,
        }
    }

    pub(crate) fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Reads once into the free space. `Ok(None)`: nothing to read now.
    /// `Ok(Some((n, full)))`: `n` bytes (0 = end of stream); `full` if the read filled
    /// the free space, so more may be waiting.
    pub(crate) fn fill(&mut self, sock: &mut TcpStream) -> io::Result<Option<(usize, bool)>> {
        let cap = self.buf.len();
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if cap - self.end < MAX_FRAME {
            // Keep room for a whole frame at the tail.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let free = cap - self.end;
        loop {
            match sock.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    if n == free && cap < MAX_CAP {
                        self.buf.resize(cap * 2, 0);
                    }
                    return Ok(Some((n, n == free)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Encoded bytes not yet written to the socket.
pub(crate) struct TxBuf {
    pub(crate) buf: Vec<u8>,
    off: usize,
}

impl TxBuf {
    pub(crate) fn new() -> TxBuf {
        TxBuf {
            buf: Vec::with_capacity(START_CAP),
            off: 0,
        }
    }

    /// Whether one more frame of any size may be encoded (the buffer grows up to
    /// `MAX_CAP` when output backs up or a bulk transfer is being encoded).
    pub(crate) fn has_room(&self) -> bool {
        self.buf.len() + MAX_FRAME <= MAX_CAP
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.len() == self.off
    }

    /// Writes what the socket accepts. `Ok(true)`: everything went out.
    pub(crate) fn flush(&mut self, sock: &TcpStream) -> io::Result<bool> {
        while self.off < self.buf.len() {
            let rest = &self.buf[self.off..];
            // SAFETY: `rest` is a live slice; MSG_NOSIGNAL turns a closed peer into
            // EPIPE instead of a process-killing SIGPIPE.
            let n = unsafe {
                libc::send(
                    sock.as_raw_fd(),
                    rest.as_ptr().cast(),
                    rest.len(),
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => break,
                    _ => return Err(e),
                }
            }
            self.off += n as usize;
        }
        if self.off == self.buf.len() {
            self.buf.clear();
            self.off = 0;
            return Ok(true);
        }
        if self.off > self.buf.capacity() / 2 {
            self.buf.drain(..self.off);
            self.off = 0;
        }
        Ok(false)
    }
}
