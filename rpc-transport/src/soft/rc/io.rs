//! Per-connection byte buffers, allocated once when the connection is set up.
//!
//! Frames are decoded straight out of `RxBuf` and encoded straight into `TxBuf`;
//! one `read` and one `send` per progress pass move everything that is ready.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use super::super::wire::MAX_FRAME;

/// Received bytes not yet decoded.
pub(crate) struct RxBuf {
    buf: Box<[u8]>,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

// Two frames each way (~130 KiB per connection): enough to keep a socket busy with
// large messages, small enough for a server with hundreds of connections.
const RX_CAP: usize = 2 * MAX_FRAME;
const TX_CAP: usize = 2 * MAX_FRAME;

impl RxBuf {
    pub(crate) fn new() -> RxBuf {
        RxBuf {
            buf: vec![0u8; RX_CAP].into_boxed_slice(),
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
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if RX_CAP - self.end < MAX_FRAME {
            // Keep room for a whole frame at the tail.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let free = RX_CAP - self.end;
        loop {
            match sock.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(Some((n, n == free)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Discards everything buffered.
    pub(crate) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
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
            buf: Vec::with_capacity(TX_CAP),
            off: 0,
        }
    }

    /// Whether one more frame of any size fits without growing the buffer.
    pub(crate) fn has_room(&self) -> bool {
        self.buf.len() + MAX_FRAME <= TX_CAP
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
        if self.off > TX_CAP / 2 {
            self.buf.drain(..self.off);
            self.off = 0;
        }
        Ok(false)
    }
}
