//! The same-host fast path: RC queue pairs whose ends run on one host, in one network
//! namespace, as one user, carry their frames through shared memory instead of TCP.
//!
//! Mechanism. A QP pair always connects over TCP first (the `HELLO` names the QPs as
//! before, and now also the connecting side's host identity and its device's Unix
//! listener). If the identities match, the two sides exchange rings over an abstract
//! Unix socket ([`handshake`]): per direction one single-producer, single-consumer
//! byte ring in a sealed memfd, created by its reader, plus an eventfd doorbell
//! ([`ring`]). Each side then sends a last `SHM_SWITCH` frame on TCP and writes every
//! later frame into the peer's ring; a reader that decodes `SHM_SWITCH` reads its ring
//! from then on. The frames are the soft wire format unchanged, so the requester,
//! responder and completer do not know which link they run on (`rc::link`).
//!
//! Costs. While both sides poll, a message costs two copies (into the ring, out of
//! it) and no system call. A reader that may sleep (its CQ is armed, or the helper
//! watches it) says so in the ring's header; only then does the producer's publish
//! write the eventfd, which sits in the CQ's epoll set and the helper's exactly where
//! the TCP socket does, so tokio and the helper wake as before.
//!
//! Liveness. The TCP connection stays open and carries nothing more; its end (the peer
//! process died or dropped the QP) is read as before and moves the QP to ERR with the
//! same completions as on TCP. A reader with an empty ring looks at the socket at
//! most once a millisecond (`recv` with `MSG_PEEK`); the socket's end also wakes a
//! sleeping poller or the helper (it stays in their epoll sets), whose next pass looks.
//!
//! Limits. A malicious peer of the same uid can put any bytes into a ring it writes:
//! they are decoded exactly as bytes from a TCP peer are (a malformed frame breaks the
//! connection), and out-of-range indices or record seals are [`ring::Corrupt`]; it
//! cannot make this side read or write outside the mapping, nor shrink it (memfd
//! seals). It can stop consuming, which blocks this side's output exactly as a full TCP
//! window would (the retry budget applies). A writer that finds the ring full asks to
//! be woken when space frees (see [`ring`]). Each QP pair maps two rings of 1 MiB
//! ([`ring::RING_BYTES`]); an empty ring jumps its writer back to its start, so a
//! connection of small messages keeps about two pages of each resident, and one that
//! carried bulk data gives the pages back once its ring has been idle for 100 ms.
//!
//! Read responses with one copy ([`direct`]). A Read whose destination is one
//! contiguous range (a single SGE, checked against its lkey) names that address in its
//! request (`READ_REQ_PLACE`); the responder checks rkey, bounds and rights exactly as
//! for any Read, then copies from its region straight into the requester's memory
//! with `process_vm_writev`, 1 MiB at a time (`rc::responder::PLACE_CHUNK`: what a
//! message queued behind it waits for; a last tail of up to a ring chunk joins the
//! segment before it), and publishes a payload-less `READ_PLACED` frame per segment
//! once its bytes are in place. The segments of a lone Read of 2 MiB or more are
//! 2 MiB each and copied by two threads at once ([`split_copy`]). The right to do so is agreed per QP
//! at the handshake by a real probe (a `process_vm_writev` into a word the peer named),
//! for the pid `SO_PEERCRED` gave (0, a pid outside this pid namespace, is refused); it
//! fails under Yama's `ptrace_scope` ≥ 1, across user namespaces, or into a
//! non-dumpable process, and then that QP's Read responses go through the ring, as they
//! do with [`crate::SoftLink::Rings`] (`RDMA_RPC_SOFT_LINK=rings`). A copy refused later
//! falls back to the ring for the rest; a copy that finds the peer gone (`ESRCH`, or
//! its pidfd, opened at the handshake and looked at before each copy, says it exited)
//! ends the connection as a closed socket does. The pid-reuse window left is between
//! that look and the copy's own pid lookups (within one segment's copy, a fraction of
//! a millisecond; the pid space would have to wrap meanwhile). The requester holds each offered destination until the peer is
//! done with it (`rc::placed`). The device's statistics count the links that place
//! (`rc_direct_links`), those refused (`rc_direct_refused`) and the bytes placed each
//! way. What it saves is CPU: the ring's two copies run on two cores at once (the
//! writer fills while the reader drains), so on an otherwise idle machine a lone large
//! Read takes about as long either way; with other work to do, the copy not made is
//! time given back.
//!
//! Sends and RDMA Writes with one copy. A segment of a Send or Write that starts in
//! an SGE longer than a ring chunk (checked against its lkey) is lent, not sent: its
//! frame (`SEND_LENT`, `WRITE_LENT`) names the range in the requester's process, up to
//! `PLACE_CHUNK` of it and no further than that SGE's end (a shorter SGE, such as a
//! header, goes through the ring with the first bytes of the SGE after it), and the requester holds that memory until the message is
//! acknowledged (`rc::placed`). The responder makes every check it makes for the
//! bytes on the ring (the receive's SGEs and length, or the rkey, bounds and rights of
//! the Write) and only then copies them itself with `process_vm_readv`, straight into
//! the receive or the Write's target, before it acknowledges the message. It needs the
//! same right as placing (the probe above, which the kernel grants for reading under
//! the same ptrace check); a responder without it, or refused by the kernel later,
//! answers `NAK(send the bytes)`, and the requester sends that message again through
//! the ring and lends nothing more on the connection. A peer found gone ends the
//! connection; a lent range the peer cannot read is a broken peer (malformed). The
//! device's statistics count the bytes taken (`rc_lent_bytes_taken`) and the refusals
//! (`rc_loans_refused`). A responder takes at most a pass's read budget of lent bytes
//! per pass, so one connection's bulk cannot hold its QP for long.
//!
//! `RDMA_RPC_SOFT_LINK=tcp` or [`crate::SoftLink::Tcp`] keeps every QP of a device
//! on TCP.

pub(crate) mod direct;
pub(crate) mod handshake;
pub(crate) mod ident;
pub(crate) mod records;
pub(crate) mod ring;
pub(crate) mod split_copy;
pub(crate) mod unix;

pub(crate) use direct::PeerWriter;
pub(crate) use handshake::{Answer, Listener, Offer};
pub(crate) use ring::{Inbox, Producer};
