//! The handshake that moves a connected QP pair from TCP onto shared memory.
//!
//! It starts once the TCP connection is up and its `HELLO` told the accepting side
//! that the connecting side runs on this host, in this network namespace, as this user
//! ([`super::ident`]), and where its device listens ([`Listener`]):
//!
//! 1. The accepting QP creates its inbox (the ring it will read) and connects to the
//!    connecting device's abstract Unix listener; the kernel's `SO_PEERCRED` must name
//!    the same uid. It sends a [`REQUEST_LEN`]-byte request naming both QPs, the GID
//!    it goes by and its probe word ([`super::direct`]), with the inbox's memfd and
//!    doorbell attached.
//! 2. The connecting device's helper accepts, checks the credentials and the request
//!    against the QP it names (same peer QP and GID as the TCP connection), maps the
//!    ring as that QP's output, probes whether it may write into the requesting
//!    process, creates the QP's own inbox and replies with it and its own probe word.
//! 3. The accepting QP maps the reply's ring as its output and probes in turn.
//!
//! A probe word of 0 says "do not place Read responses into me" (direct copy is off
//! on that device), and a device with it off probes nobody. A failed probe only means
//! that this side's Read responses to that QP go through the ring.
//!
//! Each side switches its output when it holds the peer's ring (see `rc::link`). Any
//! failure (no listener, other uid, a refusal, a malformed message) leaves the pair on
//! TCP, which keeps working; nothing is half-switched.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::direct::{probe_cell, PeerWriter};
use super::ring::{Inbox, Producer};
use super::unix;
use crate::soft::sys::EventFd;

const MAGIC: &[u8; 8] = b"rrpcshm2";
/// Bytes of a request: magic, dst QPN, src QPN, GID, probe word.
pub(crate) const REQUEST_LEN: usize = 8 + 4 + 4 + 16 + 8;
/// Bytes of a reply: magic, the QPN the reply is for, probe word.
const REPLY_LEN: usize = 8 + 4 + 8;
/// How long the helper waits for a request after accepting its connection. The
/// requester sends right after connecting, so this bounds only a requester that died
/// in between (the helper is blocked meanwhile).
const REQUEST_WAIT: Duration = Duration::from_millis(100);
/// How long an offer waits for its answer before the pair settles on TCP (a helper
/// that stopped serving its listener never answers; each wait costs a `recvmsg` per
/// progress pass).
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// A device's abstract Unix listener, which handshakes arrive at.
pub(crate) struct Listener {
    fd: OwnedFd,
    /// Names the listener in `HELLO`s (never 0, which means "no shared memory").
    pub(crate) id: u64,
}

fn name(id: u64) -> String {
    format!("rdma-rpc-soft/{id:016x}")
}

impl Listener {
    pub(crate) fn open() -> io::Result<Listener> {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let id =
            (u64::from(std::process::id()) << 32) | u64::from(NEXT.fetch_add(1, Ordering::Relaxed));
        Ok(Listener {
            fd: unix::listen(&name(id))?,
            id,
        })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The next request waiting. `Ok(None)`: none; `Err`: accepting failed (look
    /// again at the next wake-up); `Ok(Some(Err))`: that connection was dropped (a
    /// malformed request, another user, no request in time): take the next one.
    pub(crate) fn accept(&self) -> io::Result<Option<io::Result<Request>>> {
        let Some(sock) = unix::accept(self.raw(), REQUEST_WAIT)? else {
            return Ok(None);
        };
        Ok(Some(read_request(sock)))
    }
}

fn read_request(sock: OwnedFd) -> io::Result<Request> {
    let (uid, pid) = unix::peer_cred(sock.as_raw_fd())?;
    // SAFETY: getuid has no preconditions.
    if uid != unsafe { libc::getuid() } {
        return Err(bad("handshake from another user"));
    }
    let mut buf = [0u8; REQUEST_LEN];
    let (n, mut fds) = unix::recv_with_fds(sock.as_raw_fd(), &mut buf)?
        .ok_or_else(|| bad("no handshake request in time"))?;
    let r = parse_request(&buf[..n]).ok_or_else(|| bad("malformed handshake request"))?;
    if fds.len() != 2 || !unix::is_eventfd(fds[1].as_raw_fd()) {
        return Err(bad("handshake request without a ring and an eventfd"));
    }
    let bell = EventFd::from_owned(fds.pop().expect("two"));
    let producer = Producer::open(&fds[0], bell)?;
    Ok(Request {
        dst_qpn: r.0,
        src_qpn: r.1,
        gid: r.2,
        cell: r.3,
        pid,
        producer,
        sock,
    })
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// What a probe found: `None` when this device does not place Read responses at all.
pub(crate) type Probe = Option<io::Result<PeerWriter>>;

fn probe(direct: bool, pid: i32, cell: u64) -> Probe {
    direct.then(|| PeerWriter::probe(pid, cell))
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Decodes a request: (dst QPN, src QPN, GID, probe word), or `None` if it is not one.
pub(crate) fn parse_request(b: &[u8]) -> Option<(u32, u32, [u8; 16], u64)> {
    if b.len() != REQUEST_LEN || &b[..8] != MAGIC {
        return None;
    }
    let be = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let (dst, src) = (be(8), be(12));
    if dst > 0x00ff_ffff || src > 0x00ff_ffff {
        return None;
    }
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[16..32]);
    Some((dst, src, gid, be64(&b[32..40])))
}

/// A handshake request that arrived at this device's listener.
pub(crate) struct Request {
    /// This device's QP it is for.
    pub(crate) dst_qpn: u32,
    /// The requesting QP.
    pub(crate) src_qpn: u32,
    /// The GID the requesting QP goes by.
    pub(crate) gid: [u8; 16],
    /// The requesting process's probe word (0: it takes no direct copies).
    cell: u64,
    /// The requesting process, as `SO_PEERCRED` names it.
    pub(crate) pid: i32,
    /// The requester's inbox, mapped: the QP's output once it switches.
    pub(crate) producer: Producer,
    sock: OwnedFd,
}

impl Request {
    /// Accepts: creates this QP's inbox and sends it back; with `direct`, probes
    /// whether this side may place Read responses into the requester. Dropping the
    /// request instead refuses (the requester sees the connection close and keeps TCP).
    pub(crate) fn answer(self, direct: bool) -> io::Result<(Producer, Inbox, Probe)> {
        let (inbox, memfd) = Inbox::create()?;
        let bell = inbox.bell().try_clone_owned()?;
        let writer = probe(direct, self.pid, self.cell);
        let mut msg = [0u8; REPLY_LEN];
        msg[..8].copy_from_slice(MAGIC);
        msg[8..12].copy_from_slice(&self.src_qpn.to_be_bytes());
        msg[12..20].copy_from_slice(&if direct { probe_cell() } else { 0 }.to_be_bytes());
        unix::send_with_fds(
            self.sock.as_raw_fd(),
            &msg,
            &[memfd.as_raw_fd(), bell.as_raw_fd()],
        )?;
        Ok((self.producer, inbox, writer))
    }
}

/// The accepting side's handshake under way: its inbox exists, the reply is awaited.
pub(crate) struct Offer {
    sock: OwnedFd,
    /// The inbox this side offered (it reads it once the peer switches).
    pub(crate) inbox: Option<Inbox>,
    qpn: u32,
    since: Instant,
    /// The listener's process, as `SO_PEERCRED` names it.
    pid: i32,
    direct: bool,
}

/// What an [`Offer`] became.
pub(crate) enum Answer {
    /// Not yet.
    Pending,
    /// The peer's inbox: this side's output from now on; and whether this side may
    /// place Read responses into the peer.
    Accepted(Producer, Probe),
    /// Refused, or the handshake failed: stay on TCP.
    Refused(io::Error),
}

impl Offer {
    /// Sends a request to the listener `listener_id` for the peer QP `peer_qpn`, from
    /// QP `qpn` going by `gid`; `direct`: this device places and takes Read responses
    /// with one copy.
    pub(crate) fn send(
        listener_id: u64,
        qpn: u32,
        peer_qpn: u32,
        gid: [u8; 16],
        direct: bool,
    ) -> io::Result<Offer> {
        let sock = unix::connect(&name(listener_id))?;
        let (uid, pid) = unix::peer_cred(sock.as_raw_fd())?;
        // SAFETY: getuid has no preconditions.
        if uid != unsafe { libc::getuid() } {
            return Err(bad("the peer's listener belongs to another user"));
        }
        let (inbox, memfd) = Inbox::create()?;
        let bell = inbox.bell().try_clone_owned()?;
        let mut msg = [0u8; REQUEST_LEN];
        msg[..8].copy_from_slice(MAGIC);
        msg[8..12].copy_from_slice(&peer_qpn.to_be_bytes());
        msg[12..16].copy_from_slice(&qpn.to_be_bytes());
        msg[16..32].copy_from_slice(&gid);
        msg[32..40].copy_from_slice(&if direct { probe_cell() } else { 0 }.to_be_bytes());
        unix::send_with_fds(
            sock.as_raw_fd(),
            &msg,
            &[memfd.as_raw_fd(), bell.as_raw_fd()],
        )?;
        Ok(Offer {
            sock,
            inbox: Some(inbox),
            qpn,
            since: Instant::now(),
            pid,
            direct,
        })
    }

    /// The socket the reply arrives on (watched like the QP's others while pending).
    pub(crate) fn raw(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Looks for the reply without blocking.
    pub(crate) fn poll(&self) -> Answer {
        let mut buf = [0u8; REPLY_LEN];
        let (n, mut fds) = match unix::recv_with_fds(self.sock.as_raw_fd(), &mut buf) {
            Ok(Some(r)) => r,
            Ok(None) if self.since.elapsed() < ANSWER_WAIT => return Answer::Pending,
            Ok(None) => return Answer::Refused(bad("no answer in time")),
            Err(e) => return Answer::Refused(e),
        };
        if n == 0 {
            return Answer::Refused(bad("the peer refused shared memory"));
        }
        if n != REPLY_LEN
            || &buf[..8] != MAGIC
            || buf[8..12] != self.qpn.to_be_bytes()
            || fds.len() != 2
            || !unix::is_eventfd(fds[1].as_raw_fd())
        {
            return Answer::Refused(bad("malformed handshake reply"));
        }
        let bell = EventFd::from_owned(fds.pop().expect("two"));
        match Producer::open(&fds[0], bell) {
            Ok(p) => Answer::Accepted(p, probe(self.direct, self.pid, be64(&buf[12..20]))),
            Err(e) => Answer::Refused(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ends of a handshake in one process: each gets a working ring toward the
    /// other, and the request names what was sent.
    #[test]
    fn handshake_gives_both_sides_a_ring() {
        let l = Listener::open().unwrap();
        let offer = Offer::send(l.id, 0x21, 0x42, [9; 16], true).unwrap();
        assert!(matches!(offer.poll(), Answer::Pending));
        let req = l.accept().unwrap().expect("the request is there").unwrap();
        assert_eq!((req.dst_qpn, req.src_qpn, req.gid), (0x42, 0x21, [9; 16]));
        assert_eq!(req.pid, std::process::id() as i32);
        let (mut to_offerer, answerer_inbox, w) = req.answer(true).unwrap();
        assert!(
            matches!(w, Some(Ok(_))),
            "the probe into this process passes"
        );
        let Answer::Accepted(mut to_answerer, w) = offer.poll() else {
            panic!("no reply");
        };
        assert!(
            matches!(w, Some(Ok(_))),
            "the probe into this process passes"
        );
        to_offerer.write(&[b"ping"]).unwrap();
        to_answerer.write(&[b"pong"]).unwrap();
        let mut b = [0u8; 4];
        offer
            .inbox
            .as_ref()
            .unwrap()
            .read(&mut [&mut b[..]])
            .unwrap();
        assert_eq!(&b, b"ping");
        answerer_inbox.read(&mut [&mut b[..]]).unwrap();
        assert_eq!(&b, b"pong");
    }

    /// A request refused (dropped) leaves the offerer refused, not waiting forever.
    #[test]
    fn refusal_is_seen() {
        let l = Listener::open().unwrap();
        let offer = Offer::send(l.id, 1, 2, [0; 16], true).unwrap();
        drop(l.accept().unwrap().unwrap().unwrap());
        assert!(matches!(offer.poll(), Answer::Refused(_)));
    }

    /// No listener under that name: the offer fails at once (the pair keeps TCP).
    #[test]
    fn missing_listener_fails_fast() {
        assert!(Offer::send(0xdead_0000_0000_0001, 1, 2, [0; 16], true).is_err());
    }

    /// One side with direct copy off: it offers no probe word, so the other side's
    /// probe fails (that side's Read responses use the ring), and it probes nobody.
    #[test]
    fn direct_copy_off_on_one_side_is_refused_by_both() {
        let l = Listener::open().unwrap();
        let offer = Offer::send(l.id, 3, 4, [1; 16], false).unwrap();
        let req = l.accept().unwrap().unwrap().unwrap();
        let (_out, _inbox, w) = req.answer(true).unwrap();
        assert!(matches!(w, Some(Err(_))), "no probe word, no writer");
        let Answer::Accepted(_, w) = offer.poll() else {
            panic!("no reply");
        };
        assert!(w.is_none(), "the side with direct copy off probes nobody");
    }

    #[test]
    fn malformed_requests_are_refused() {
        assert!(parse_request(&[0u8; REQUEST_LEN]).is_none());
        let mut m = [0u8; REQUEST_LEN];
        m[..8].copy_from_slice(MAGIC);
        assert!(parse_request(&m).is_some());
        m[8] = 1; // QPN beyond 24 bits
        assert!(parse_request(&m).is_none());
        assert!(parse_request(&m[..REQUEST_LEN - 1]).is_none());
    }
}
