//! The soft provider's wire format, version 5: the only place it is defined.
//!
//! # RC frames (over one TCP connection per connected QP pair, both directions)
//!
//! Every frame starts with a 16-byte header, then an opcode-specific extension of
//! fixed size, then `len` payload bytes. All integers are big endian.
//!
//! ```text
//! 0       1       2       3       4               8               12              16
//! +-------+-------+-------+-------+---------------+---------------+---------------+
//! |version|opcode | flags |  0    |     seq       |     ack       |     len       |
//! +-------+-------+-------+-------+---------------+---------------+---------------+
//! ```
//!
//! * `seq` (24 bits used): message sequence number of a request, or of the request a
//!   response answers. Requests are numbered from the requester's `sq_psn`, one number
//!   per message (not per segment); the responder expects its `rq_psn` first.
//! * `ack` (24 bits used): the sender's responder-side "next expected seq", i.e. a
//!   cumulative acknowledgement of every request before it. Every frame carries it, so
//!   acknowledgements ride on whatever goes the other way; a bare `ACK` frame is only
//!   sent when nothing else is going out.
//! * `flags`: `FIRST`/`LAST` delimit the segments of one message (payloads are cut at
//!   the sender's chunk size, at most [`MAX_SEG`]), `IMM` says the extension's
//!   immediate is present, `SOLICITED` is the solicited-event bit.
//!
//! | opcode | extension | payload |
//! | --- | --- | --- |
//! | `HELLO` 1 | src GID (16), src QPN (4), dst QPN (4), host identity (8), shared-memory listener (8) | none |
//! | `SEND` 2 | imm (4) | message bytes |
//! | `WRITE` 3 | remote va (8), rkey (4), imm (4) | bytes for `va` |
//! | `READ_REQ` 4 | remote va (8), rkey (4), length (4) | none |
//! | `READ_RESP` 5 | none | read bytes, in order |
//! | `ATOMIC_REQ` 6 | va (8), rkey (4), kind (4: 0 fetch-add, 1 cmp-swap), add/compare (8), swap (8) | none |
//! | `ATOMIC_RESP` 7 | original value (8) | none |
//! | `ACK` 8 | none | none |
//! | `SHM_SWITCH` 10 | none | none |
//! | `READ_REQ_PLACE` 11 | remote va (8), rkey (4), length (4), destination (8) | none |
//! | `READ_PLACED` 12 | bytes placed (4) | none |
//! | `SEND_LENT` 13 | imm (4), source (8), length (4) | none |
//! | `WRITE_LENT` 14 | remote va (8), rkey (4), imm (4), source (8), length (4) | none |
//! | `NAK` 9 | syndrome (1: RNR, 2: invalid request, 3: remote access, 4: remote operational, 5: QP in error, 6: send the bytes), RNR timer code (1), zero (2) | none |
//!
//! `HELLO` is the first frame on a new connection, from the connecting side; it names
//! which QP the connection belongs to. Its host identity and listener (both 0 when the
//! connecting device keeps to TCP) let the accepting side offer shared memory
//! (`soft::shm`). `SHM_SWITCH` is the last frame a side sends on TCP: its later frames
//! come through the shared-memory ring.
//!
//! `READ_REQ_PLACE` is a `READ_REQ` from a requester on shared memory that also names
//! the address, in its own process, where the `length` bytes go (one contiguous,
//! checked range it holds until the Read ends). A responder that may write there
//! (`soft::shm::direct`) copies the bytes itself, a segment at a time, and answers each
//! segment with `READ_PLACED` (flags `FIRST`/`LAST` as a `READ_RESP` segment's) once
//! its bytes are in place; one that may not answers with `READ_RESP` as usual, and so
//! may switch from the one to the other at any segment boundary.
//!
//! `SEND_LENT` and `WRITE_LENT` are a `SEND` or `WRITE` segment whose `length` (1 to
//! [`MAX_SEG`]) bytes do not follow: they lie at `source` in the requester's process,
//! one contiguous checked range it holds until the message is acknowledged. A
//! responder that may read there (`soft::shm::direct`) makes the same checks as for the
//! segment's bytes on the link and then copies them itself; one that may not answers
//! `NAK` 6 ("send the bytes"), and the requester sends the message again from its
//! first segment, with its bytes, as it would after an RNR NAK (without the wait), and
//! lends nothing more on that connection.
//!
//! # UD datagrams (one UDP datagram each)
//!
//! ```text
//! version (1) | opcode UD_SEND 0x10 (1) | flags (1: IMM, SOLICITED) | 0 (1) |
//! src QPN (4) | dst QPN (4) | Q_Key (4) | imm (4) | len (4) | payload (len)
//! ```
//! `len` must equal the bytes that follow.
//!
//! Decoders validate every field and length and return [`WireError`]; they never panic.
//!
//! Version 2 raised [`MAX_SEG`] from 32 KiB to 1 MiB (a version-1 peer would refuse
//! the larger frames, so it is refused at its `HELLO` instead). Version 3 added the
//! `HELLO`'s host identity and listener and `SHM_SWITCH`; version 4 `READ_REQ_PLACE`
//! and `READ_PLACED`; version 5 `SEND_LENT`, `WRITE_LENT` and NAK 6.
//!
//! Versioning: every frame and datagram starts with [`VERSION`]. A peer speaking
//! another version is refused, not misread: its `HELLO` fails to decode and the
//! connection is dropped (the connecting QP sees a dead peer and moves to ERR), and
//! its datagrams are counted as malformed.

use std::fmt;

/// Wire format version carried in every frame and datagram.
pub(crate) const VERSION: u8 = 5;
/// Length of the common RC frame header.
pub(crate) const HDR_LEN: usize = 16;
/// Largest payload of one RC frame a receiver accepts; senders cut messages into
/// frames of at most their chunk size (which must not exceed this).
pub(crate) const MAX_SEG: usize = 1024 * 1024;
/// Length of the UD datagram header.
pub(crate) const UD_HDR_LEN: usize = 24;
/// Largest extension of any opcode.
pub(crate) const MAX_EXT: usize = 40;
/// Size of a `HELLO` frame.
pub(crate) const HELLO_LEN: usize = HDR_LEN + 40;
/// Sequence numbers (and QPNs) use 24 bits.
pub(crate) const SEQ_MASK: u32 = 0x00ff_ffff;

/// First segment of a message.
pub(crate) const FIRST: u8 = 1;
/// Last segment of a message.
pub(crate) const LAST: u8 = 2;
/// The immediate is present.
pub(crate) const IMM: u8 = 4;
/// Solicited-event bit.
pub(crate) const SOLICITED: u8 = 8;

const OP_HELLO: u8 = 1;
const OP_SEND: u8 = 2;
const OP_WRITE: u8 = 3;
const OP_READ_REQ: u8 = 4;
const OP_READ_RESP: u8 = 5;
const OP_ATOMIC_REQ: u8 = 6;
const OP_ATOMIC_RESP: u8 = 7;
const OP_ACK: u8 = 8;
const OP_NAK: u8 = 9;
const OP_SHM_SWITCH: u8 = 10;
const OP_READ_REQ_PLACE: u8 = 11;
const OP_READ_PLACED: u8 = 12;
const OP_SEND_LENT: u8 = 13;
const OP_WRITE_LENT: u8 = 14;
const OP_UD_SEND: u8 = 0x10;

/// Why a NAK was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nak {
    /// Receiver not ready: no receive posted; retry after the timer (IB timer code).
    Rnr(u8),
    /// Invalid request (receive too small, misaligned atomic, bad opcode).
    InvalidRequest,
    /// Remote access error (rkey, bounds, rights).
    RemoteAccess,
    /// Remote operational error (the responder failed to write its own memory).
    RemoteOp,
    /// The responder QP is in the error state and will answer nothing: the requester
    /// fails at once, as it would after exhausting its retries against a silent QP.
    QpError,
    /// The responder cannot take a lent segment's bytes from the requester: the
    /// message must come again from its first segment, bytes on the link.
    SendBytes,
}

impl Nak {
    /// Whether the responder that sent it executes nothing more (it is in ERR, or
    /// about to be): RNR and "send the bytes" only ask for the message again.
    pub(crate) fn ends_responder(self) -> bool {
        !matches!(self, Nak::Rnr(_) | Nak::SendBytes)
    }
}

/// The kind of an atomic request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Atomic {
    /// Fetch-and-add `add`.
    FetchAdd {
        /// Value added.
        add: u64,
    },
    /// Compare `compare` and swap in `swap`.
    CmpSwap {
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
}

/// The opcode-specific part of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Body {
    /// Names the QP a new connection belongs to.
    Hello {
        /// GID of the connecting device.
        gid: [u8; 16],
        /// Connecting QP.
        src_qpn: u32,
        /// QP the connection is meant for.
        dst_qpn: u32,
        /// The connecting side's host identity (`soft::shm::ident`; 0: none).
        host: u64,
        /// Its device's shared-memory listener (0: it keeps to TCP).
        listener: u64,
    },
    /// A segment of a Send.
    Send {
        /// Immediate (meaningful with `IMM`).
        imm: u32,
    },
    /// A segment of an RDMA Write; `va` is where this segment's payload goes.
    Write {
        /// Remote address of this segment.
        va: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate (meaningful with `IMM`).
        imm: u32,
    },
    /// A Send segment whose bytes the requester lends (`SEND_LENT`).
    SendLent {
        /// Immediate (meaningful with `IMM`).
        imm: u32,
        /// The lent bytes, in the requester's process.
        lent: Lent,
    },
    /// An RDMA Write segment whose bytes the requester lends (`WRITE_LENT`).
    WriteLent {
        /// Remote address of this segment.
        va: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate (meaningful with `IMM`).
        imm: u32,
        /// The lent bytes, in the requester's process.
        lent: Lent,
    },
    /// An RDMA Read request.
    ReadReq {
        /// Remote address.
        va: u64,
        /// Remote key.
        rkey: u32,
        /// Bytes to read.
        len: u32,
        /// Where the bytes go in the requester's process, if the responder may place
        /// them there itself (`READ_REQ_PLACE`).
        place: Option<u64>,
    },
    /// A segment of an RDMA Read response.
    ReadResp,
    /// A segment of an RDMA Read response that the responder placed itself.
    ReadPlaced {
        /// Bytes of the segment.
        len: u32,
    },
    /// An atomic request.
    AtomicReq {
        /// Remote address (8-byte aligned).
        va: u64,
        /// Remote key.
        rkey: u32,
        /// Operation.
        op: Atomic,
    },
    /// The original value an atomic found.
    AtomicResp {
        /// Value before the operation.
        orig: u64,
    },
    /// Cumulative acknowledgement only.
    Ack,
    /// The sender's later frames come through shared memory.
    ShmSwitch,
    /// Negative acknowledgement of request `seq`.
    Nak(Nak),
}

/// A segment's bytes lent by the requester: `len` (1 to [`MAX_SEG`]) bytes at `src`
/// in its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lent {
    /// Address in the requester's process.
    pub src: u64,
    /// Bytes.
    pub len: u32,
}

impl Head {
    /// The segment a lent head stands for: its body without the loan (`Send` or
    /// `Write`), `len` the lent bytes. Other heads are returned as they are.
    pub(crate) fn unlent(&self) -> Head {
        let (body, len) = match self.body {
            Body::SendLent { imm, lent } => (Body::Send { imm }, lent.len),
            Body::WriteLent {
                va,
                rkey,
                imm,
                lent,
            } => (Body::Write { va, rkey, imm }, lent.len),
            _ => return *self,
        };
        Head { body, len, ..*self }
    }
}

/// A decoded RC frame, borrowing its payload from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame<'a> {
    /// `FIRST`, `LAST`, `IMM`, `SOLICITED`.
    pub flags: u8,
    /// Message sequence number.
    pub seq: u32,
    /// Cumulative acknowledgement.
    pub ack: u32,
    /// Opcode and extension.
    pub body: Body,
    /// Payload bytes.
    pub payload: &'a [u8],
}

/// A decoded RC frame header and extension; `len` payload bytes follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    /// `FIRST`, `LAST`, `IMM`, `SOLICITED`.
    pub flags: u8,
    /// Message sequence number.
    pub seq: u32,
    /// Cumulative acknowledgement.
    pub ack: u32,
    /// Opcode and extension.
    pub body: Body,
    /// Payload bytes that follow.
    pub len: u32,
}

/// A decoded UD datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Datagram<'a> {
    /// `IMM`, `SOLICITED`.
    pub flags: u8,
    /// Sending QP.
    pub src_qpn: u32,
    /// Destination QP.
    pub dst_qpn: u32,
    /// Q_Key the sender used.
    pub qkey: u32,
    /// Immediate (meaningful with `IMM`).
    pub imm: u32,
    /// Payload bytes.
    pub payload: &'a [u8],
}

/// What is wrong with an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireError {
    /// Unknown version.
    Version(u8),
    /// Unknown opcode.
    Opcode(u8),
    /// Flags this opcode does not allow.
    Flags(u8),
    /// A reserved field is not zero.
    Reserved,
    /// Payload length out of range for the opcode, or not matching the datagram.
    Length(u32),
    /// A 24-bit field has high bits set.
    Range,
    /// Unknown atomic kind or NAK syndrome.
    Kind(u32),
    /// Input too short.
    Truncated,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Version(v) => write!(f, "unknown wire version {v}"),
            WireError::Opcode(o) => write!(f, "unknown opcode {o}"),
            WireError::Flags(x) => write!(f, "flags {x:#x} not valid for opcode"),
            WireError::Reserved => f.write_str("reserved field not zero"),
            WireError::Length(l) => write!(f, "bad payload length {l}"),
            WireError::Range => f.write_str("24-bit field out of range"),
            WireError::Kind(k) => write!(f, "unknown kind {k}"),
            WireError::Truncated => f.write_str("truncated"),
        }
    }
}

impl std::error::Error for WireError {}

fn ext_len(op: u8) -> Option<usize> {
    Some(match op {
        OP_HELLO => 40,
        OP_SEND => 4,
        OP_WRITE => 16,
        OP_READ_REQ => 16,
        OP_READ_RESP => 0,
        OP_ATOMIC_REQ => 32,
        OP_ATOMIC_RESP => 8,
        OP_ACK => 0,
        OP_NAK => 4,
        OP_SHM_SWITCH => 0,
        OP_READ_REQ_PLACE => 24,
        OP_READ_PLACED => 4,
        OP_SEND_LENT => 16,
        OP_WRITE_LENT => 28,
        _ => return None,
    })
}

fn allowed_flags(op: u8) -> u8 {
    match op {
        OP_SEND | OP_WRITE | OP_SEND_LENT | OP_WRITE_LENT => FIRST | LAST | IMM | SOLICITED,
        OP_READ_RESP | OP_READ_PLACED => FIRST | LAST,
        _ => 0,
    }
}

fn carries_payload(op: u8) -> bool {
    matches!(op, OP_SEND | OP_WRITE | OP_READ_RESP)
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

/// Decodes the header and extension at the head of `buf`, without waiting for the
/// payload: the receiver decides where the payload goes (straight into registered
/// memory, or nowhere) before reading it.
///
/// `Ok(None)`: more bytes are needed. `Ok(Some((head, n)))`: a head of `n` bytes,
/// followed by `head.len` payload bytes. The fixed header is validated as soon as it
/// is complete, so a bad length is reported before waiting for anything more.
pub(crate) fn decode_head(buf: &[u8]) -> Result<Option<(Head, usize)>, WireError> {
    if buf.len() < HDR_LEN {
        return Ok(None);
    }
    if buf[0] != VERSION {
        return Err(WireError::Version(buf[0]));
    }
    let op = buf[1];
    let flags = buf[2];
    let ext = ext_len(op).ok_or(WireError::Opcode(op))?;
    if flags & !allowed_flags(op) != 0 {
        return Err(WireError::Flags(flags));
    }
    if buf[3] != 0 {
        return Err(WireError::Reserved);
    }
    let seq = be32(buf, 4);
    let ack = be32(buf, 8);
    let len = be32(buf, 12);
    if seq & !SEQ_MASK != 0 || ack & !SEQ_MASK != 0 {
        return Err(WireError::Range);
    }
    let max = if carries_payload(op) { MAX_SEG } else { 0 };
    if len as usize > max {
        return Err(WireError::Length(len));
    }
    if buf.len() < HDR_LEN + ext {
        return Ok(None);
    }
    let e = &buf[HDR_LEN..HDR_LEN + ext];
    let body = match op {
        OP_HELLO => {
            let mut gid = [0u8; 16];
            gid.copy_from_slice(&e[..16]);
            let (src_qpn, dst_qpn) = (be32(e, 16), be32(e, 20));
            if src_qpn & !SEQ_MASK != 0 || dst_qpn & !SEQ_MASK != 0 {
                return Err(WireError::Range);
            }
            Body::Hello {
                gid,
                src_qpn,
                dst_qpn,
                host: be64(e, 24),
                listener: be64(e, 32),
            }
        }
        OP_SEND => Body::Send { imm: be32(e, 0) },
        OP_WRITE => Body::Write {
            va: be64(e, 0),
            rkey: be32(e, 8),
            imm: be32(e, 12),
        },
        OP_READ_REQ | OP_READ_REQ_PLACE => Body::ReadReq {
            va: be64(e, 0),
            rkey: be32(e, 8),
            len: be32(e, 12),
            place: (op == OP_READ_REQ_PLACE).then(|| be64(e, 16)),
        },
        OP_SEND_LENT => Body::SendLent {
            imm: be32(e, 0),
            lent: lent_at(e, 4)?,
        },
        OP_WRITE_LENT => Body::WriteLent {
            va: be64(e, 0),
            rkey: be32(e, 8),
            imm: be32(e, 12),
            lent: lent_at(e, 16)?,
        },
        OP_READ_RESP => Body::ReadResp,
        OP_READ_PLACED => Body::ReadPlaced { len: be32(e, 0) },
        OP_ATOMIC_REQ => {
            let (a, b) = (be64(e, 16), be64(e, 24));
            let op = match be32(e, 12) {
                0 if b == 0 => Atomic::FetchAdd { add: a },
                0 => return Err(WireError::Reserved),
                1 => Atomic::CmpSwap {
                    compare: a,
                    swap: b,
                },
                k => return Err(WireError::Kind(k)),
            };
            Body::AtomicReq {
                va: be64(e, 0),
                rkey: be32(e, 8),
                op,
            }
        }
        OP_ATOMIC_RESP => Body::AtomicResp { orig: be64(e, 0) },
        OP_ACK => Body::Ack,
        OP_SHM_SWITCH => Body::ShmSwitch,
        OP_NAK => {
            if e[2] != 0 || e[3] != 0 {
                return Err(WireError::Reserved);
            }
            let nak = match e[0] {
                1 if e[1] <= 31 => Nak::Rnr(e[1]),
                2..=6 if e[1] != 0 => return Err(WireError::Reserved),
                2 => Nak::InvalidRequest,
                3 => Nak::RemoteAccess,
                4 => Nak::RemoteOp,
                5 => Nak::QpError,
                6 => Nak::SendBytes,
                k => return Err(WireError::Kind(u32::from(k))),
            };
            Body::Nak(nak)
        }
        _ => return Err(WireError::Opcode(op)),
    };
    Ok(Some((
        Head {
            flags,
            seq,
            ack,
            body,
            len,
        },
        HDR_LEN + ext,
    )))
}

/// The loan at `e[at..at + 12]`: source (8), length (4) of 1 to [`MAX_SEG`] bytes.
fn lent_at(e: &[u8], at: usize) -> Result<Lent, WireError> {
    let len = be32(e, at + 8);
    if len == 0 || len as usize > MAX_SEG {
        return Err(WireError::Length(len));
    }
    Ok(Lent {
        src: be64(e, at),
        len,
    })
}

/// Decodes the whole frame at the head of `buf` (header, extension and payload).
///
/// `Ok(None)`: more bytes are needed. `Ok(Some((frame, n)))`: a frame of `n` bytes.
pub(crate) fn decode(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, WireError> {
    let Some((h, at)) = decode_head(buf)? else {
        return Ok(None);
    };
    let total = at + h.len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    Ok(Some((
        Frame {
            flags: h.flags,
            seq: h.seq,
            ack: h.ack,
            body: h.body,
            payload: &buf[at..total],
        },
        total,
    )))
}

/// Appends a frame header and extension to `out`; the caller appends exactly
/// `payload_len` payload bytes after it.
///
/// # Panics
/// In debug builds, if the arguments violate what [`decode`] accepts.
pub(crate) fn encode(
    out: &mut Vec<u8>,
    flags: u8,
    seq: u32,
    ack: u32,
    body: &Body,
    payload_len: usize,
) {
    let (op, ext): (u8, [u8; MAX_EXT]) = {
        let mut e = [0u8; MAX_EXT];
        let op = match *body {
            Body::Hello {
                gid,
                src_qpn,
                dst_qpn,
                host,
                listener,
            } => {
                e[..16].copy_from_slice(&gid);
                e[16..20].copy_from_slice(&src_qpn.to_be_bytes());
                e[20..24].copy_from_slice(&dst_qpn.to_be_bytes());
                e[24..32].copy_from_slice(&host.to_be_bytes());
                e[32..40].copy_from_slice(&listener.to_be_bytes());
                OP_HELLO
            }
            Body::Send { imm } => {
                e[..4].copy_from_slice(&imm.to_be_bytes());
                OP_SEND
            }
            Body::Write { va, rkey, imm } => {
                e[..8].copy_from_slice(&va.to_be_bytes());
                e[8..12].copy_from_slice(&rkey.to_be_bytes());
                e[12..16].copy_from_slice(&imm.to_be_bytes());
                OP_WRITE
            }
            Body::SendLent { imm, lent } => {
                e[..4].copy_from_slice(&imm.to_be_bytes());
                put_lent(&mut e[4..16], lent);
                OP_SEND_LENT
            }
            Body::WriteLent {
                va,
                rkey,
                imm,
                lent,
            } => {
                e[..8].copy_from_slice(&va.to_be_bytes());
                e[8..12].copy_from_slice(&rkey.to_be_bytes());
                e[12..16].copy_from_slice(&imm.to_be_bytes());
                put_lent(&mut e[16..28], lent);
                OP_WRITE_LENT
            }
            Body::ReadReq {
                va,
                rkey,
                len,
                place,
            } => {
                e[..8].copy_from_slice(&va.to_be_bytes());
                e[8..12].copy_from_slice(&rkey.to_be_bytes());
                e[12..16].copy_from_slice(&len.to_be_bytes());
                match place {
                    Some(at) => {
                        e[16..24].copy_from_slice(&at.to_be_bytes());
                        OP_READ_REQ_PLACE
                    }
                    None => OP_READ_REQ,
                }
            }
            Body::ReadResp => OP_READ_RESP,
            Body::ReadPlaced { len } => {
                e[..4].copy_from_slice(&len.to_be_bytes());
                OP_READ_PLACED
            }
            Body::AtomicReq { va, rkey, op } => {
                let (kind, a, b) = match op {
                    Atomic::FetchAdd { add } => (0u32, add, 0),
                    Atomic::CmpSwap { compare, swap } => (1, compare, swap),
                };
                e[..8].copy_from_slice(&va.to_be_bytes());
                e[8..12].copy_from_slice(&rkey.to_be_bytes());
                e[12..16].copy_from_slice(&kind.to_be_bytes());
                e[16..24].copy_from_slice(&a.to_be_bytes());
                e[24..32].copy_from_slice(&b.to_be_bytes());
                OP_ATOMIC_REQ
            }
            Body::AtomicResp { orig } => {
                e[..8].copy_from_slice(&orig.to_be_bytes());
                OP_ATOMIC_RESP
            }
            Body::Ack => OP_ACK,
            Body::ShmSwitch => OP_SHM_SWITCH,
            Body::Nak(n) => {
                (e[0], e[1]) = match n {
                    Nak::Rnr(t) => (1, t),
                    Nak::InvalidRequest => (2, 0),
                    Nak::RemoteAccess => (3, 0),
                    Nak::RemoteOp => (4, 0),
                    Nak::QpError => (5, 0),
                    Nak::SendBytes => (6, 0),
                };
                OP_NAK
            }
        };
        (op, e)
    };
    debug_assert!(flags & !allowed_flags(op) == 0);
    debug_assert!(payload_len <= if carries_payload(op) { MAX_SEG } else { 0 });
    out.extend_from_slice(&[VERSION, op, flags, 0]);
    out.extend_from_slice(&(seq & SEQ_MASK).to_be_bytes());
    out.extend_from_slice(&(ack & SEQ_MASK).to_be_bytes());
    out.extend_from_slice(&(payload_len as u32).to_be_bytes());
    let n = ext_len(op).unwrap_or(0);
    out.extend_from_slice(&ext[..n]);
}

fn put_lent(e: &mut [u8], lent: Lent) {
    e[..8].copy_from_slice(&lent.src.to_be_bytes());
    e[8..12].copy_from_slice(&lent.len.to_be_bytes());
}

/// Writes a UD datagram header for `payload_len` bytes into `out[..UD_HDR_LEN]`.
pub(crate) fn encode_ud(
    out: &mut [u8; UD_HDR_LEN],
    flags: u8,
    src: u32,
    dst: u32,
    qkey: u32,
    imm: u32,
    payload_len: usize,
) {
    out[..4].copy_from_slice(&[VERSION, OP_UD_SEND, flags & (IMM | SOLICITED), 0]);
    out[4..8].copy_from_slice(&src.to_be_bytes());
    out[8..12].copy_from_slice(&dst.to_be_bytes());
    out[12..16].copy_from_slice(&qkey.to_be_bytes());
    out[16..20].copy_from_slice(&imm.to_be_bytes());
    out[20..24].copy_from_slice(&(payload_len as u32).to_be_bytes());
}

/// Decodes one UD datagram (the whole of `buf`).
pub(crate) fn decode_ud(buf: &[u8]) -> Result<Datagram<'_>, WireError> {
    if buf.len() < UD_HDR_LEN {
        return Err(WireError::Truncated);
    }
    if buf[0] != VERSION {
        return Err(WireError::Version(buf[0]));
    }
    if buf[1] != OP_UD_SEND {
        return Err(WireError::Opcode(buf[1]));
    }
    if buf[2] & !(IMM | SOLICITED) != 0 {
        return Err(WireError::Flags(buf[2]));
    }
    if buf[3] != 0 {
        return Err(WireError::Reserved);
    }
    let (src_qpn, dst_qpn) = (be32(buf, 4), be32(buf, 8));
    if src_qpn & !SEQ_MASK != 0 || dst_qpn & !SEQ_MASK != 0 {
        return Err(WireError::Range);
    }
    let len = be32(buf, 20);
    if len as usize != buf.len() - UD_HDR_LEN {
        return Err(WireError::Length(len));
    }
    Ok(Datagram {
        flags: buf[2],
        src_qpn,
        dst_qpn,
        qkey: be32(buf, 12),
        imm: be32(buf, 16),
        payload: &buf[UD_HDR_LEN..],
    })
}

/// Fuzzing entry point: decodes `data` as an RC byte stream and as a UD datagram,
/// checks that every frame it accepts re-encodes to the same bytes, and that the head
/// decoder (which the receiver uses, before the payload arrives) agrees with the
/// whole-frame decoder on every input.
#[doc(hidden)]
pub fn fuzz_one(data: &[u8]) {
    let mut rest = data;
    let mut out = Vec::new();
    loop {
        let whole = decode(rest);
        match (decode_head(rest), &whole) {
            (Err(a), Err(b)) => assert_eq!(a, *b, "decoders disagree on the error"),
            (Ok(None), Ok(None)) => {}
            (Ok(Some((h, at))), Ok(None)) => {
                assert!(
                    rest.len() < at + h.len as usize,
                    "complete frame not decoded"
                )
            }
            (Ok(Some((h, at))), Ok(Some((f, n)))) => {
                assert_eq!(at + h.len as usize, *n, "head length differs");
                assert_eq!(
                    (h.flags, h.seq, h.ack, h.body),
                    (f.flags, f.seq, f.ack, f.body)
                );
            }
            (h, w) => panic!("decoders disagree: head {h:?}, frame {w:?}"),
        }
        let Ok(Some((f, n))) = whole else { break };
        out.clear();
        encode(&mut out, f.flags, f.seq, f.ack, &f.body, f.payload.len());
        out.extend_from_slice(f.payload);
        assert_eq!(out, &rest[..n], "re-encoding differs");
        rest = &rest[n..];
    }
    if let Ok(d) = decode_ud(data) {
        let mut h = [0u8; UD_HDR_LEN];
        encode_ud(
            &mut h,
            d.flags,
            d.src_qpn,
            d.dst_qpn,
            d.qkey,
            d.imm,
            d.payload.len(),
        );
        assert_eq!(&h[..], &data[..UD_HDR_LEN]);
    }
}

/// Whether `a` comes before `b` in 24-bit sequence space.
pub(crate) fn seq_lt(a: u32, b: u32) -> bool {
    let d = b.wrapping_sub(a) & SEQ_MASK;
    d != 0 && d < 0x80_0000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(flags: u8, body: Body, payload: &[u8]) {
        let mut out = Vec::new();
        encode(&mut out, flags, 0x12_3456, 0xab_cdef, &body, payload.len());
        out.extend_from_slice(payload);
        for cut in 0..out.len() {
            assert_eq!(decode(&out[..cut]).unwrap(), None, "prefix {cut} must wait");
        }
        let (f, n) = decode(&out).unwrap().unwrap();
        assert_eq!(n, out.len());
        assert_eq!(f.body, body);
        assert_eq!(
            (f.flags, f.seq, f.ack, f.payload),
            (flags, 0x12_3456, 0xab_cdef, payload)
        );
    }

    #[test]
    fn every_opcode_round_trips() {
        round_trip(
            0,
            Body::Hello {
                gid: [7; 16],
                src_qpn: 0x101,
                dst_qpn: 0x102,
                host: 0x0123_4567_89ab_cdef,
                listener: u64::MAX,
            },
            &[],
        );
        round_trip(
            FIRST | LAST | IMM | SOLICITED,
            Body::Send { imm: 9 },
            b"hello",
        );
        round_trip(
            FIRST,
            Body::Write {
                va: u64::MAX,
                rkey: 3,
                imm: 0,
            },
            &[1; 100],
        );
        round_trip(
            0,
            Body::ReadReq {
                va: 8,
                rkey: 4,
                len: 1 << 30,
                place: None,
            },
            &[],
        );
        round_trip(
            0,
            Body::ReadReq {
                va: 8,
                rkey: 4,
                len: 1 << 30,
                place: Some(0x7fff_1234_5000),
            },
            &[],
        );
        round_trip(LAST, Body::ReadResp, &[0; MAX_SEG]);
        round_trip(FIRST | LAST, Body::ReadPlaced { len: 1 << 20 }, &[]);
        round_trip(
            0,
            Body::AtomicReq {
                va: 16,
                rkey: 1,
                op: Atomic::FetchAdd { add: 5 },
            },
            &[],
        );
        round_trip(
            0,
            Body::AtomicReq {
                va: 16,
                rkey: 1,
                op: Atomic::CmpSwap {
                    compare: 1,
                    swap: 2,
                },
            },
            &[],
        );
        round_trip(0, Body::AtomicResp { orig: 42 }, &[]);
        round_trip(0, Body::Ack, &[]);
        round_trip(0, Body::ShmSwitch, &[]);
        round_trip(0, Body::Nak(Nak::Rnr(12)), &[]);
        round_trip(0, Body::Nak(Nak::RemoteAccess), &[]);
        round_trip(0, Body::Nak(Nak::QpError), &[]);
        round_trip(0, Body::Nak(Nak::SendBytes), &[]);
        let lent = Lent {
            src: 0x7fff_0000_1000,
            len: MAX_SEG as u32,
        };
        round_trip(
            FIRST | IMM | SOLICITED,
            Body::SendLent { imm: 7, lent },
            &[],
        );
        round_trip(
            LAST,
            Body::WriteLent {
                va: 1 << 40,
                rkey: 5,
                imm: 6,
                lent,
            },
            &[],
        );
    }

    /// A loan of no bytes, or of more than a segment may carry, is malformed; so is a
    /// lent head with bytes after it.
    #[test]
    fn lent_lengths_are_checked() {
        for len in [0, MAX_SEG as u32 + 1] {
            let mut b = Vec::new();
            let lent = Lent { src: 64, len: 1 };
            encode(&mut b, FIRST, 1, 0, &Body::SendLent { imm: 0, lent }, 0);
            b[HDR_LEN + 12..HDR_LEN + 16].copy_from_slice(&len.to_be_bytes());
            assert_eq!(decode(&b).err(), Some(WireError::Length(len)));
        }
        let mut b = Vec::new();
        let lent = Lent { src: 64, len: 9 };
        encode(
            &mut b,
            0,
            1,
            0,
            &Body::WriteLent {
                va: 0,
                rkey: 1,
                imm: 0,
                lent,
            },
            0,
        );
        b[15] = 9;
        assert_eq!(decode(&b).err(), Some(WireError::Length(9)));
        // The segment it stands for: the same head with the lent bytes as its length.
        b[15] = 0;
        let (h, _) = decode_head(&b).unwrap().unwrap();
        assert_eq!(
            (h.unlent().body, h.unlent().len),
            (
                Body::Write {
                    va: 0,
                    rkey: 1,
                    imm: 0
                },
                9
            )
        );
    }

    #[test]
    fn bad_headers_are_errors_not_waits() {
        let mut ok = Vec::new();
        encode(&mut ok, FIRST | LAST, 1, 0, &Body::Send { imm: 0 }, 0);
        let bad = |i: usize, v: u8| {
            let mut b = ok.clone();
            b[i] = v;
            decode(&b).map(|o| o.map(|(_, n)| n))
        };
        // Versions 1 (32 KiB frames), 2 (no shared memory), 3 (no placed Read
        // responses) and 4 (no lent segments) are refused as any other.
        for old in 1..VERSION {
            assert_eq!(bad(0, old), Err(WireError::Version(old)));
        }
        assert_eq!(bad(0, VERSION + 1), Err(WireError::Version(VERSION + 1)));
        assert_eq!(bad(1, 99), Err(WireError::Opcode(99)));
        assert_eq!(bad(2, 0x80), Err(WireError::Flags(0x80)));
        assert_eq!(bad(3, 1), Err(WireError::Reserved));
        assert_eq!(bad(4, 1), Err(WireError::Range));
        // A length beyond MAX_SEG is refused from the header alone.
        let mut b = ok[..HDR_LEN].to_vec();
        b[12..16].copy_from_slice(&(MAX_SEG as u32 + 1).to_be_bytes());
        assert_eq!(
            decode(&b).err(),
            Some(WireError::Length(MAX_SEG as u32 + 1))
        );
        // Payload on an opcode that carries none.
        let mut ack = Vec::new();
        encode(&mut ack, 0, 0, 0, &Body::Ack, 0);
        ack[15] = 1;
        assert_eq!(decode(&ack).err(), Some(WireError::Length(1)));
    }

    #[test]
    fn ud_datagram_round_trips_and_rejects_bad_lengths() {
        let mut h = [0u8; UD_HDR_LEN];
        encode_ud(&mut h, IMM, 5, 6, 0x1111, 77, 3);
        let mut d = h.to_vec();
        d.extend_from_slice(b"abc");
        let g = decode_ud(&d).unwrap();
        assert_eq!(
            (g.src_qpn, g.dst_qpn, g.qkey, g.imm, g.payload),
            (5, 6, 0x1111, 77, &b"abc"[..])
        );
        assert_eq!(decode_ud(&d[..d.len() - 1]), Err(WireError::Length(3)));
        assert_eq!(decode_ud(&d[..10]), Err(WireError::Truncated));
    }

    #[test]
    fn fuzz_entry_survives_garbage() {
        let mut x: u64 = 1;
        for len in 0..300 {
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 13) as u8
                })
                .collect();
            fuzz_one(&v);
        }
    }

    #[test]
    fn sequence_numbers_wrap() {
        assert!(seq_lt(SEQ_MASK, 0));
        assert!(seq_lt(1, 2));
        assert!(!seq_lt(2, 2));
        assert!(!seq_lt(3, 2));
    }
}
