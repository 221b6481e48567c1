//! The soft provider: a userspace RDMA device (RC over TCP, UD over UDP).
//!
//! Each opened device is one "NIC" with its own address: a TCP listener and a UDP
//! socket on the same `bind:port`, whose GID is [`crate::Gid::soft`] of that address.
//! It enforces what hardware enforces (QP states, keys, bounds and rights on every
//! access, RNR, flushes, CQ overrun) and reports the same completion statuses as
//! ibverbs (rxe where IBA leaves a choice).
//!
//! How RC payloads move: once. A Send, Write or Read response goes from the
//! registered memory into the socket with its frame head in one `sendmsg` (payloads
//! of at most 1 KiB are copied next to their head instead: cheaper, measured); an
//! incoming payload is read with `readv` straight into its destination (the posted
//! receive, the Write's target, the Read's local memory) once the head has passed the
//! key, bounds and rights checks; a refused payload is read off the stream and
//! dropped. Messages are cut into chunks (`rc::tx::CHUNK`) so that a small message on
//! the same connection waits behind at most one chunk of a large one. UD keeps one
//! copy each way (a datagram is built in, and received into, a provider buffer).
//!
//! On one host (same boot, network namespace and user, checked by the kernel), an RC
//! connection starts on TCP and then moves its frames onto shared-memory rings
//! (`shm`): a payload is copied into the ring and out of it (two copies, as through
//! the kernel), and no system call is made per message while both sides poll; the TCP
//! socket stays as the liveness signal. RDMA Read responses skip the ring where the
//! kernel allows one process to write the other: the responder copies them straight
//! into the requester's memory (one copy, `shm::direct`). [`SoftLink::Tcp`] or
//! `RDMA_RPC_SOFT_LINK=tcp` keeps TCP, [`SoftLink::Rings`] or `rings` keeps every
//! payload in the rings; [`SoftStats::rc_shm_links`] counts the connections that
//! moved, [`SoftStats::rc_read_bytes_placed`] the bytes placed directly.
//!
//! Where the work happens: `post_send` encodes frames and writes them at once;
//! `CompletionQueue::poll` reads the sockets of that CQ's QPs, processes frames and
//! flushes output before popping completions (manual progress). One helper thread per
//! device accepts connections and makes progress only for QPs whose CQs nobody polls;
//! it sleeps while the device is idle and never wakes per message.
//!
//! | module | concept |
//! | --- | --- |
//! | [`wire`] | the wire format (versioned), encode and decode |
//! | `device`, `pd` | the device, PDs, MRs, AHs, counters |
//! | `keys`, `mem` | the key table and checked copies to and from registered memory |
//! | `pieces` | checked ranges of registered memory a payload is read into or sent from |
//! | `cq`, `srq`, `events` | completion queues (and progress), SRQs, async events |
//! | `compact`, `idle_receives` | handing back what a burst of connections left behind |
//! | `qp` | QP state, posting, flushes |
//! | `rc` | RC over TCP: connection, requester, responder, input (`rx`), output (`tx`), byte transport (`link`) |
//! | `shm` | the same-host link: shared-memory rings, their handshake, host identity |
//! | `ud` | UD over UDP |
//! | `faults` | deterministic UD fault injection |
//! | `helper` | the helper thread |
//! | `sys` | eventfd and epoll wrappers |
//!
//! Locks, in the order they may nest: a CQ's member list, a QP, then the leaves (an
//! SRQ, the key table, a CQ ring, the event queue, the parked-connection list). Each
//! is per object and uncontended in the common case of one thread per CQ.

mod compact;
mod cq;
mod device;
mod events;
mod faults;
mod held_for_peer;
mod helper;
mod idle_receives;
mod keys;
mod lid;
mod mem;
mod mw;
mod pd;
mod peer_copies;
mod pieces;
mod profile;
mod qp;
mod rc;
#[doc(hidden)]
pub(crate) mod shm;
mod srq;
mod sys;
#[cfg(test)]
mod tests;
mod ud;
#[doc(hidden)]
pub(crate) mod wire;
mod wrap;

use std::net::Ipv4Addr;

pub(crate) use cq::Cq;
pub(crate) use device::Device;
pub(crate) use mw::Mw;
pub(crate) use pd::{Ah, Mr, Pd};
pub use peer_copies::copied_for_peers;
pub use profile::{SoftProfile, SOFT_PROFILE_ENV};
pub(crate) use qp::Qp;
pub(crate) use srq::Srq;

/// Drops the pages of every soft SRQ's idle posted receives; returns the bytes.
pub(crate) fn release_idle_receives() -> usize {
    idle_receives::release()
}

/// Forgets what dropped QPs left in every soft device's tables (see `compact`).
pub(crate) fn compact_tables() {
    compact::compact();
}

/// Name under which the soft device is listed.
pub(crate) const DEVICE_NAME: &str = "soft0";

/// Settings of a soft device.
#[derive(Debug, Clone, PartialEq)]
pub struct SoftConfig {
    /// Address the device listens on (TCP for RC, UDP for UD, same port). The
    /// unspecified address serves every address of the host; its QPs then go by the
    /// address a peer reaches them at ([`crate::QueuePair::endpoint_via`]).
    pub bind: Ipv4Addr,
    /// Port; 0 picks a free one.
    pub port: u16,
    /// UD MTU in bytes (payload limit of one datagram).
    pub ud_mtu: u32,
    /// UD fault injection, for tests of the layers above.
    pub ud_faults: UdFaults,
    /// How RC QPs reach peers on the same host ([`SOFT_LINK_ENV`] can force TCP).
    pub link: SoftLink,
}

/// Environment variable that forces every soft device onto TCP for RC: `tcp`; or onto
/// shared-memory rings without direct copies (every payload through the ring): `rings`.
/// Unset, empty or `auto`: [`SoftConfig::link`] decides. Any other value makes opens
/// fail with an error naming it.
pub const SOFT_LINK_ENV: &str = "RDMA_RPC_SOFT_LINK";

/// How a soft device's RC QPs carry their frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SoftLink {
    /// Shared memory when both ends are on this host, in this network namespace, run
    /// by this user (and both devices allow it); TCP otherwise. On shared memory, Read
    /// responses are placed into the requester's memory with one copy where the kernel
    /// allows it (`process_vm_writev`; see [`SoftStats::rc_direct_links`]).
    #[default]
    Auto,
    /// Always TCP.
    Tcp,
    /// As [`SoftLink::Auto`], but every payload goes through the rings (two copies):
    /// no process writes into another.
    Rings,
}

impl SoftLink {
    /// `self`, unless [`SOFT_LINK_ENV`] forces TCP.
    pub(crate) fn with_env(self) -> crate::error::Result<SoftLink> {
        match std::env::var(SOFT_LINK_ENV) {
            Ok(v) if v == "tcp" => Ok(SoftLink::Tcp),
            Ok(v) if v == "rings" && self != SoftLink::Tcp => Ok(SoftLink::Rings),
            Ok(v) if v.is_empty() || v == "auto" => Ok(self),
            Err(std::env::VarError::NotPresent) => Ok(self),
            Ok(v) => Err(crate::error::Error::InvalidArgument(format!(
                "${SOFT_LINK_ENV}={v:?}: expected tcp, rings or auto"
            ))),
            Err(std::env::VarError::NotUnicode(v)) => Err(crate::error::Error::InvalidArgument(
                format!("${SOFT_LINK_ENV}={v:?}: expected tcp, rings or auto"),
            )),
        }
    }
}

impl Default for SoftConfig {
    fn default() -> Self {
        SoftConfig {
            bind: Ipv4Addr::LOCALHOST,
            port: 0,
            ud_mtu: 4096,
            ud_faults: UdFaults::default(),
            link: SoftLink::Auto,
        }
    }
}

/// Probabilities (0.0..=1.0) applied to every UD datagram this device sends.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct UdFaults {
    /// Drop the datagram.
    pub loss: f64,
    /// Send it twice.
    pub duplicate: f64,
    /// Hold it back and send it after the next one.
    pub reorder: f64,
    /// Seed of the deterministic generator deciding the faults.
    pub seed: u64,
}

/// Counters of a soft device (see [`crate::Device::soft_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SoftStats {
    /// UD datagrams handed to the socket (duplicates and released reorders included).
    pub ud_sent: u64,
    /// UD datagrams delivered into a receive.
    pub ud_received: u64,
    /// UD datagrams dropped for lack of a posted receive (or a QP not yet in RTR).
    pub ud_dropped_no_recv: u64,
    /// UD datagrams that did not decode.
    pub ud_dropped_malformed: u64,
    /// UD datagrams whose Q_Key did not match the destination QP's.
    pub ud_dropped_qkey: u64,
    /// UD datagrams dropped by fault injection.
    pub ud_dropped_injected: u64,
    /// UD datagrams addressed to no UD QP of this device.
    pub ud_dropped_no_qp: u64,
    /// UD datagrams sent twice by fault injection.
    pub ud_duplicated: u64,
    /// RC frames (or hellos) that did not decode; each moved its QP to ERR.
    pub rc_frames_malformed: u64,
    /// RC connections established.
    pub rc_connections: u64,
    /// RC connections whose output (from this device) moved to shared memory.
    pub rc_shm_links: u64,
    /// Doorbells (eventfd writes) rung on shared-memory links: for a reader that said
    /// it sleeps, for a writer waiting for room, for bytes left unread for a
    /// millisecond. While both sides poll, none are rung: a count growing with the
    /// messages means a side sleeps between them.
    pub rc_shm_doorbells: u64,
    /// Of those, connections on which this device places Read responses straight into
    /// the requester's memory (its probe `process_vm_writev` passed).
    pub rc_direct_links: u64,
    /// Shared-memory connections on which this device tried to place Read responses
    /// directly and may not (the probe failed, or a later copy was refused): their
    /// Read responses go through the ring.
    pub rc_direct_refused: u64,
    /// Read response bytes this device placed into requesters directly.
    pub rc_read_bytes_placed: u64,
    /// Read response bytes responders placed into this device's Reads directly.
    pub rc_read_bytes_placed_by_peer: u64,
    /// Send and RDMA Write bytes this device's responders took straight from the
    /// requester's memory (segments the requester lent: one copy, `process_vm_readv`).
    pub rc_lent_bytes_taken: u64,
    /// Lent segments this device's responders could not take (no right to read the
    /// requester, or the kernel refused): the requester sent those messages again
    /// with their bytes, and lends no more on that connection.
    pub rc_loans_refused: u64,
    /// RC frames this device's QPs answered with an RNR NAK (no receive posted).
    pub rc_rnr_naks: u64,
    /// QPs of this device that exist now (a gauge, not a counter: a server's should
    /// return to where it was once its clients have left).
    pub live_qps: u64,
    /// Memory regions registered on this device now (a gauge, as `live_qps`).
    pub live_mrs: u64,
    /// Buffers of destroyed QPs kept because their peers may still copy into or out
    /// of them (placed Reads, lent segments), until those peers close their ends (a
    /// gauge: back to 0 once they have).
    pub held_for_peers: u64,
}
