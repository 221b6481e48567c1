//! Memory a destroyed RC QP had let its peer access, kept until that peer can no
//! longer access it.
//!
//! On one host the peer copies into a Read's destination, or out of a lent Send or
//! Write segment, by itself (`rc::placed`). A QP destroyed before the peer said it
//! was done cannot free that memory at once: a later allocation at the same address
//! would receive the peer's late bytes, or lend it someone else's. Its buffers and
//! its TCP socket come here instead. The socket's write side is shut down, so the
//! peer reads the end of the connection, fails its QP, and closes its socket, which
//! it does only once no copy of its is under way (it copies under its QP's lock, and
//! drops its connection under the same lock). That close, or the peer process's
//! exit, which closes the socket too, makes the socket readable at end of stream:
//! the helper thread sees it and lets the buffers go. A peer that never closes its
//! end keeps them for as long as it keeps its connection. A device dropped meanwhile
//! leaves its helper thread waiting for those peers alone, until none is held
//! (`helper::release_held`).

use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};

use crate::mr_buffer::MrBuffer;

/// One destroyed QP's buffers and the socket that says when its peer is gone.
struct Held {
    sock: TcpStream,
    bufs: Vec<Arc<MrBuffer>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        keep_mapped(
            self.bufs.drain(..),
            "soft device gone while a destroyed QP's peer",
        );
    }
}

/// Keeps `bufs` mapped for the life of the process (logged with `whose`): a peer
/// may still copy into or out of them, and nothing will say when it stops.
pub(crate) fn keep_mapped(bufs: impl ExactSizeIterator<Item = Arc<MrBuffer>>, whose: &str) {
    if bufs.len() == 0 {
        return;
    }
    tracing::debug!(
        buffers = bufs.len(),
        "{whose} may still access these buffers: they stay mapped"
    );
    bufs.for_each(std::mem::forget);
}

/// The device's held buffers, by socket.
#[derive(Default)]
pub(crate) struct HeldForPeer {
    held: Mutex<Vec<Held>>,
}

impl HeldForPeer {
    /// Keeps `bufs` until the peer at the other end of `sock` closes it; shuts down
    /// this side's writing so that it does. Returns the socket's descriptor, for the
    /// caller to watch for readability.
    pub(crate) fn hold(&self, sock: TcpStream, bufs: Vec<Arc<MrBuffer>>) -> RawFd {
        // Already shut down or reset: `readable` finds it so.
        let _ = sock.shutdown(Shutdown::Write);
        let fd = sock.as_raw_fd();
        self.lock().push(Held { sock, bufs });
        fd
    }

    /// The socket `fd` is readable: if the peer closed it (or it failed), lets go
    /// of its buffers and closes it; `true` if it stays held (watch it again).
    /// Frames the peer still sent are read and dropped.
    pub(crate) fn readable(&self, fd: RawFd) -> bool {
        let mut held = self.lock();
        let Some(i) = held.iter().position(|h| h.sock.as_raw_fd() == fd) else {
            return false;
        };
        let mut scratch = [0u8; 4096];
        let gone = loop {
            match (&held[i].sock).read(&mut scratch) {
                Ok(0) => break true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(_) => break true,
            }
        };
        if gone {
            let mut h = held.swap_remove(i);
            h.bufs.clear();
        }
        !gone
    }

    /// Buffers held now.
    pub(crate) fn buffers(&self) -> usize {
        self.lock().iter().map(|h| h.bufs.len()).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}
