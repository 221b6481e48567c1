//! The responder half: executing incoming requests against local memory and
//! receives, and queueing responses (Read data, atomic results, NAKs) in request order.
//!
//! Errors follow rxe: a request the QP's access flags do not allow, or a misaligned
//! atomic, is an invalid request; a bad rkey, range or MR right is a remote access
//! error; a receive too small is a local length error on the receive and an invalid
//! request for the sender. In each case the NAK goes out after the responses queued
//! before it, and then the responder QP moves to ERR.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::access::AccessFlags;
use crate::mr_buffer::MrBuffer;
use crate::wc::{WcOpcode, WcStatus, WorkCompletion};

use super::super::device::bump;
use super::super::pieces::{Pieces, PlanError};
use super::super::shm::direct::WriteError;
use super::super::shm::split_copy::LargeRead;
use super::super::wire::{self, Atomic, Body, Nak, SEQ_MASK};
use super::tx::{CHUNK, COPY_MAX};
use super::{Fault, FrameContext};

/// Bytes of one placed Read response segment (`READ_PLACED`): a message queued behind
/// a placed Read waits for at most one such copy (1 MiB: about 0.2 ms at the 5 GB/s
/// of `process_vm_writev` here). Larger than a ring [`CHUNK`] because each segment
/// also costs a look at the peer's pidfd, a system call, a frame and, at the
/// requester, often a wake-up. Measured (`rpc-bench --systems rdma-rpc,tonic,tcp
/// --sizes 1M,4M --concurrency 1,16`, 3 rounds alternating against 256 KiB): 1 MiB
/// x 1 echo 1,686-1,982 -> 2,003-2,228 MB/s and CPU per call 835-977 -> 709-766 µs,
/// 4 MiB x 1 CPU per call 2.74-2.82 -> 2.40-2.62 ms, the x 16 cells unchanged; 4 MiB
/// segments gave no more than 1 MiB in two rounds.
pub(crate) const PLACE_CHUNK: usize = 1024 * 1024;

/// Bytes of one segment copied by two threads (`shm::split_copy`): it takes about as
/// long as a [`PLACE_CHUNK`] copied by one, so what waits behind it waits no longer,
/// and a lone large Read pays half the per-segment costs (above, and the assistant's
/// wake-up). Measured (`rpc-bench --systems rdma-rpc,tcp --sizes 4M --concurrency
/// 1,16 --duration 2`, 3 rounds alternating against 1 MiB split segments): 4 MiB x 1
/// echo 4,140-4,438 -> 5,077-5,589 MB/s, CPU per call 1,253-1,344 -> 1,148-1,226 µs;
/// x 16 (not split) unchanged. Whole 4 MiB segments gave 6,369 and 6,977 MB/s in two
/// rounds, at twice the wait for what queues behind.
pub(crate) const SPLIT_PLACE_CHUNK: usize = 2 * PLACE_CHUNK;

/// The next placed segment of a Read with `rest` bytes to go: at most `chunk`, except
/// that a tail of up to a ring [`CHUNK`] after it rides with it. Messages are often
/// a round size plus a few bytes of framing (a protobuf `bytes` field of 1 MiB
/// encodes to 1 MiB + 4 B): as a segment of its own, such a tail cost a pass, a
/// frame and often a wake-up of the requester, for a few bytes. (A requester checks
/// only that the segments add up to the Read, so this needs no change of the wire;
/// lent Send and Write segments are bounded by the wire's `MAX_SEG`, and keep
/// `PLACE_CHUNK`.)
fn segment(rest: usize, chunk: usize) -> usize {
    if rest <= chunk + CHUNK {
        rest
    } else {
        chunk
    }
}

/// A message being received into a receive WQE (Send, or Write with immediate); the
/// WQE itself is `RcProtocol::in_wqe`.
pub(crate) struct InMsg {
    pd: u32,
    off: u64,
}

/// A response waiting for room in the TX buffer.
pub(crate) enum Resp {
    Read {
        seq: u32,
        ptr: *const u8,
        len: u64,
        off: u64,
        buf: Option<Arc<MrBuffer>>,
        /// Where the requester asked the bytes to be placed (`READ_REQ_PLACE`).
        place: Option<u64>,
        /// A placed Read large enough to be split between two threads.
        large: Option<LargeRead>,
    },
    Atomic {
        seq: u32,
        orig: u64,
    },
    Nak {
        seq: u32,
        nak: Nak,
        fatal: bool,
    },
}

// SAFETY: `ptr` points into the buffer `_buf` keeps alive; the QP lock serialises
// every use of a `Resp`, and MR memory is only accessed through raw copies.
unsafe impl Send for Resp {}

/// Whether the frame is the next request this responder expects.
fn in_order(cx: &FrameContext<'_>, seq: u32) -> bool {
    !cx.st.failed && seq == cx.st.expected
}

/// Whether a segment of the expected message is to be dropped: one of its lent
/// segments could not be taken, and this is not its first segment sent again. The
/// first clears the state; the message's receive (if it took one) is kept for it.
fn awaiting_resend(cx: &mut FrameContext<'_>, h: &wire::Head) -> bool {
    if !cx.st.resend {
        return false;
    }
    if h.flags & wire::FIRST == 0 {
        return true;
    }
    cx.st.resend = false;
    if let Some(m) = cx.st.in_msg.as_mut() {
        m.off = 0;
    }
    false
}

fn advance(cx: &mut FrameContext<'_>) {
    cx.st.expected = (cx.st.expected + 1) & SEQ_MASK;
    // The ACK is owed from now; it rides on the next frame out, or goes alone once
    // it has waited `ACK_DELAY_NS`.
    cx.st.owed_since.get_or_insert(cx.now);
}

/// Queues a NAK that moves this QP to ERR once it is sent.
fn fatal(cx: &mut FrameContext<'_>, seq: u32, nak: Nak) {
    cx.st.failed = true;
    cx.st.write_open = false;
    cx.st.resps.push_back(Resp::Nak {
        seq,
        nak,
        fatal: true,
    });
}

fn rnr(cx: &mut FrameContext<'_>, seq: u32) {
    super::super::device::bump(&cx.qp.dev.stats.rc_rnr_naks);
    let nak = Nak::Rnr(cx.attr.min_rnr_timer);
    cx.st.resps.push_back(Resp::Nak {
        seq,
        nak,
        fatal: false,
    });
}

fn complete_recv(
    cx: &mut FrameContext<'_>,
    m: &InMsg,
    opcode: WcOpcode,
    imm: Option<u32>,
    sol: bool,
) -> Result<(), Fault> {
    let wc = WorkCompletion {
        wr_id: cx.st.in_wqe.wr_id,
        opcode,
        byte_len: m.off as u32,
        imm_data: imm,
        qp_num: cx.qp.qpn,
        src_qp: cx.st.peer_qpn,
        ..WorkCompletion::default()
    };
    if cx.qp.recv_cq.push(wc, sol) {
        Ok(())
    } else {
        Err(Fault::Err)
    }
}

/// Fails the receive in progress with `status` and NAKs the sender.
fn fail_recv(cx: &mut FrameContext<'_>, seq: u32, status: WcStatus, nak: Nak) -> Result<(), Fault> {
    if cx.st.in_msg.take().is_some() && !cx.qp.push_recv_error(cx.st.in_wqe.wr_id, status) {
        return Err(Fault::Err);
    }
    fatal(cx, seq, nak);
    Ok(())
}

/// The head of a Send segment: takes the receive (FIRST), checks the receive's SGEs
/// for the segment's bytes and points `into` at them. Every check is made before any
/// byte of the payload is read.
pub(super) fn send_head(
    cx: &mut FrameContext<'_>,
    h: &wire::Head,
    into: &mut Pieces,
) -> Result<(), Fault> {
    if !in_order(cx, h.seq) {
        return Ok(());
    }
    let again = cx.st.resend;
    if awaiting_resend(cx, h) {
        return Ok(());
    }
    if h.flags & wire::FIRST != 0 && !(again && cx.st.in_msg.is_some()) {
        if cx.st.in_msg.is_some() || cx.st.write_open {
            return Err(Fault::Broken);
        }
        let Some(pd) = cx.qp.take_recv_into(cx.rq, &mut cx.st.in_wqe) else {
            // Everything up to the retransmission of this message (a FIRST segment
            // with the same sequence number) is now dropped by `in_order`/`in_msg`.
            rnr(cx, h.seq);
            return Ok(());
        };
        cx.st.in_msg = Some(InMsg { pd, off: 0 });
    }
    let Some(m) = cx.st.in_msg.as_ref() else {
        return Ok(()); // the rest of a message that was NAKed
    };
    let keys = &cx.qp.dev.keys;
    match into.resolve(
        keys,
        m.pd,
        cx.st.in_wqe.sges(),
        m.off,
        h.len as usize,
        AccessFlags::LOCAL_WRITE,
    ) {
        Ok(()) => Ok(()),
        Err(PlanError::Len) => fail_recv(cx, h.seq, WcStatus::LocLenErr, Nak::InvalidRequest),
        Err(PlanError::Prot(_)) => fail_recv(cx, h.seq, WcStatus::LocProtErr, Nak::RemoteOp),
    }
}

/// A Send segment's payload has landed.
pub(super) fn send_end(cx: &mut FrameContext<'_>, h: &wire::Head, imm: u32) -> Result<(), Fault> {
    if !in_order(cx, h.seq) || cx.st.resend {
        return Ok(());
    }
    let Some(m) = cx.st.in_msg.as_mut() else {
        return Ok(());
    };
    m.off += u64::from(h.len);
    if h.flags & wire::LAST != 0 {
        let m = cx.st.in_msg.take().expect("checked above");
        let imm = (h.flags & wire::IMM != 0).then_some(imm);
        complete_recv(cx, &m, WcOpcode::Recv, imm, h.flags & wire::SOLICITED != 0)?;
        advance(cx);
    }
    Ok(())
}

/// The head of a Write segment: checks the QP's rights (FIRST), takes the receive of
/// a Write with immediate, checks the rkey, range and rights for the segment's bytes
/// and points `into` at them.
pub(super) fn write_head(
    cx: &mut FrameContext<'_>,
    h: &wire::Head,
    va: u64,
    rkey: u32,
    into: &mut Pieces,
) -> Result<(), Fault> {
    if !in_order(cx, h.seq) {
        return Ok(());
    }
    let again = cx.st.resend && cx.st.write_open;
    if awaiting_resend(cx, h) {
        return Ok(());
    }
    if again {
        // Sent again from its first segment: rights checked and receive taken before.
    } else if h.flags & wire::FIRST != 0 {
        if cx.st.in_msg.is_some() || cx.st.write_open {
            return Err(Fault::Broken);
        }
        if !cx.attr.access.contains(AccessFlags::REMOTE_WRITE) {
            fatal(cx, h.seq, Nak::InvalidRequest);
            return Ok(());
        }
        if h.flags & wire::IMM != 0 {
            let Some(pd) = cx.qp.take_recv_into(cx.rq, &mut cx.st.in_wqe) else {
                rnr(cx, h.seq);
                return Ok(());
            };
            cx.st.in_msg = Some(InMsg { pd, off: 0 });
        }
        cx.st.write_open = true;
    } else if !cx.st.write_open {
        return Ok(()); // the rest of a message that was NAKed
    }
    if h.len > 0 {
        let need = AccessFlags::REMOTE_WRITE;
        let len = u64::from(h.len);
        let (pd, qpn) = (cx.qp.pd.id, cx.qp.qpn);
        match cx.qp.dev.keys.resolve_remote(rkey, pd, qpn, va, len, need) {
            Ok(r) => into.set_one(r.ptr, h.len as usize, r.buf),
            // A receive taken by a Write with immediate is flushed.
            Err(_) => return fail_recv(cx, h.seq, WcStatus::WrFlushErr, Nak::RemoteAccess),
        }
    }
    Ok(())
}

/// A Write segment's payload has landed.
pub(super) fn write_end(cx: &mut FrameContext<'_>, h: &wire::Head, imm: u32) -> Result<(), Fault> {
    if !in_order(cx, h.seq) || !cx.st.write_open || cx.st.resend {
        return Ok(());
    }
    if let Some(m) = cx.st.in_msg.as_mut() {
        m.off += u64::from(h.len);
    }
    if h.flags & wire::LAST != 0 {
        cx.st.write_open = false;
        if let Some(m) = cx.st.in_msg.take() {
            complete_recv(
                cx,
                &m,
                WcOpcode::RecvRdmaWithImm,
                Some(imm),
                h.flags & wire::SOLICITED != 0,
            )?;
        }
        advance(cx);
    }
    Ok(())
}

/// A lent segment (`SEND_LENT`, `WRITE_LENT`): the same checks as for the segment it
/// stands for, then its bytes are taken from the requester's process into where they
/// belong. Without the right to do so (or refused by the kernel now) the requester is
/// asked to send the message again with its bytes; the segments of it that follow
/// are dropped meanwhile.
pub(super) fn take_lent(
    cx: &mut FrameContext<'_>,
    lent_head: &wire::Head,
    lent: wire::Lent,
    into: &mut Pieces,
) -> Result<(), Fault> {
    let h = lent_head.unlent();
    let (send, imm) = match h.body {
        Body::Send { imm } => {
            send_head(cx, &h, into)?;
            (true, imm)
        }
        Body::Write { va, rkey, imm } => {
            write_head(cx, &h, va, rkey, into)?;
            (false, imm)
        }
        _ => unreachable!("only lent heads are unlent"),
    };
    if !into.is_discard() {
        let taken = match cx.peer {
            Some(w) => w.read_into(into, lent.src),
            None => Err(WriteError::Denied),
        };
        into.clear();
        match taken {
            Ok(()) => {
                super::super::peer_copies::add(lent.len as usize);
                cx.st.taken += lent.len as usize;
                let s = &cx.qp.dev.stats.rc_lent_bytes_taken;
                s.fetch_add(u64::from(lent.len), Ordering::Relaxed);
            }
            Err(WriteError::Denied) => {
                bump(&cx.qp.dev.stats.rc_loans_refused);
                cx.st.resend = true;
                cx.st.resps.push_back(Resp::Nak {
                    seq: h.seq,
                    nak: Nak::SendBytes,
                    fatal: false,
                });
                return Ok(());
            }
            Err(WriteError::Gone) => return Err(Fault::Broken),
            Err(WriteError::BadAddress) => {
                // The requester lent memory it does not have: a broken peer.
                bump(&cx.qp.dev.stats.rc_frames_malformed);
                return Err(Fault::Broken);
            }
        }
    }
    if send {
        send_end(cx, &h, imm)
    } else {
        write_end(cx, &h, imm)
    }
}

pub(super) fn on_read_req(
    cx: &mut FrameContext<'_>,
    seq: u32,
    va: u64,
    rkey: u32,
    len: u32,
    place: Option<u64>,
) -> Result<(), Fault> {
    if !in_order(cx, seq) {
        return Ok(());
    }
    if !cx.attr.access.contains(AccessFlags::REMOTE_READ) {
        fatal(cx, seq, Nak::InvalidRequest);
        return Ok(());
    }
    let (ptr, buf) = if len == 0 {
        (std::ptr::null(), None)
    } else {
        match cx.qp.dev.keys.resolve_remote(
            rkey,
            cx.qp.pd.id,
            cx.qp.qpn,
            va,
            u64::from(len),
            AccessFlags::REMOTE_READ,
        ) {
            Ok(r) => (r.ptr as *const u8, Some(r.buf)),
            Err(_) => {
                fatal(cx, seq, Nak::RemoteAccess);
                return Ok(());
            }
        }
    };
    cx.st.resps.push_back(Resp::Read {
        seq,
        ptr,
        len: u64::from(len),
        off: 0,
        buf,
        place,
        large: place.and_then(|_| LargeRead::enter(u64::from(len))),
    });
    advance(cx);
    Ok(())
}

pub(super) fn on_atomic(
    cx: &mut FrameContext<'_>,
    seq: u32,
    va: u64,
    rkey: u32,
    op: Atomic,
) -> Result<(), Fault> {
    if !in_order(cx, seq) {
        return Ok(());
    }
    if !cx.attr.access.contains(AccessFlags::REMOTE_ATOMIC) || !va.is_multiple_of(8) {
        fatal(cx, seq, Nak::InvalidRequest);
        return Ok(());
    }
    let r = match cx.qp.dev.keys.resolve_remote(
        rkey,
        cx.qp.pd.id,
        cx.qp.qpn,
        va,
        8,
        AccessFlags::REMOTE_ATOMIC,
    ) {
        Ok(r) => r,
        Err(_) => {
            fatal(cx, seq, Nak::RemoteAccess);
            return Ok(());
        }
    };
    // SAFETY: `r.ptr` is 8-byte aligned (checked) and the 8 bytes lie in the live
    // buffer held by `r.buf`; every atomic of this device on that memory goes through
    // an `AtomicU64` at the same address, so they are atomic with respect to each other.
    // The provider itself touches registered memory only through raw copies; a plain
    // access by the application racing with this atomic is the same race it would be
    // with a NIC, which the verbs contract leaves to the application.
    let a = unsafe { AtomicU64::from_ptr(r.ptr.cast::<u64>()) };
    let orig = match op {
        Atomic::FetchAdd { add } => a.fetch_add(add, Ordering::SeqCst),
        Atomic::CmpSwap { compare, swap } => a
            .compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst)
            .unwrap_or_else(|v| v),
    };
    cx.st.resps.push_back(Resp::Atomic { seq, orig });
    advance(cx);
    Ok(())
}

/// Encodes queued responses while the TX buffer has room. Returns `true` once a
/// fatal NAK has been encoded: the QP must then move to ERR. With `cx.peer`, Read
/// responses are placed into the peer; a placed segment ends the turn (the requester
/// half goes next).
pub(super) fn pump(cx: &mut FrameContext<'_>) -> Result<bool, Fault> {
    let writer = cx.peer;
    while cx.tx.has_room() {
        let Some(r) = cx.st.resps.front_mut() else {
            break;
        };
        match r {
            Resp::Nak { seq, nak, fatal } => {
                let (seq, nak, fatal) = (*seq, *nak, *fatal);
                cx.st.resps.pop_front();
                cx.frame(0, seq, &Body::Nak(nak), 0);
                if fatal {
                    return Ok(true);
                }
            }
            Resp::Atomic { seq, orig } => {
                let (seq, orig) = (*seq, *orig);
                cx.st.resps.pop_front();
                cx.frame(0, seq, &Body::AtomicResp { orig }, 0);
            }
            Resp::Read {
                seq,
                ptr,
                len,
                off,
                buf,
                place,
                large,
            } => {
                let (seq, ptr, len, start) = (*seq, *ptr, *len, *off);
                if let (Some(at), Some(w)) = (*place, writer) {
                    let split = large.as_ref().is_some_and(LargeRead::alone);
                    let chunk = if split {
                        SPLIT_PLACE_CHUNK
                    } else {
                        PLACE_CHUNK
                    };
                    let seg = segment((len - start) as usize, chunk);
                    // SAFETY: `[ptr + start, + seg)` is inside the range checked at
                    // request time, in the buffer `buf` holds.
                    match unsafe { w.write(ptr.add(start as usize), seg, at + start, split) } {
                        Ok(()) => {
                            super::super::peer_copies::add(seg);
                            *off += seg as u64;
                            let mut flags = if start == 0 { wire::FIRST } else { 0 };
                            let last = start + seg as u64 == len;
                            if last {
                                flags |= wire::LAST;
                                cx.st.resps.pop_front();
                            }
                            let alone = cx.tx.is_empty();
                            // The bytes are in place before the frame that says so
                            // is published.
                            cx.frame(flags, seq, &Body::ReadPlaced { len: seg as u32 }, 0);
                            if !last && alone {
                                // The requester acts on the last segment only: a
                                // sleeping one is woken once per Read, not per MiB.
                                cx.tx.mark_quiet();
                            }
                            cx.tx.placed += seg;
                            let s = &cx.qp.dev.stats;
                            s.rc_read_bytes_placed
                                .fetch_add(seg as u64, std::sync::atomic::Ordering::Relaxed);
                            return Ok(false);
                        }
                        Err(WriteError::Denied) => {
                            // The kernel changed its mind: the ring carries the rest.
                            bump(&cx.qp.dev.stats.rc_direct_refused);
                            *place = None;
                            continue;
                        }
                        // A dead peer ends the connection as a closed socket does.
                        Err(WriteError::Gone) => return Err(Fault::Broken),
                        Err(WriteError::BadAddress) => {
                            bump(&cx.qp.dev.stats.rc_frames_malformed);
                            return Err(Fault::Broken);
                        }
                    }
                }
                let want = ((len - start) as usize).min(CHUNK);
                let seg = cx.tx.room_for(want);
                if seg < want.min(1) {
                    break; // no room for a useful piece: after the next flush
                }
                let keep = buf.clone();
                *off += seg as u64;
                let mut flags = 0;
                if start == 0 {
                    flags |= wire::FIRST;
                }
                let last = start + seg as u64 == len;
                if last {
                    flags |= wire::LAST;
                    cx.st.resps.pop_front();
                }
                cx.frame(flags, seq, &Body::ReadResp, seg);
                if seg <= COPY_MAX {
                    let p = cx.tx.buf.len();
                    cx.tx.buf.resize(p + seg, 0);
                    // SAFETY: `[ptr + start, + seg)` is inside the range checked at
                    // request time, in the buffer `keep` holds; the head buffer is
                    // provider-private, so the two cannot overlap.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            ptr.add(start as usize),
                            cx.tx.buf[p..].as_mut_ptr(),
                            seg,
                        )
                    };
                } else if let Some(keep) = keep {
                    // SAFETY: `[ptr + start, + seg)` is inside the range checked at
                    // request time, in the buffer `keep` holds.
                    unsafe { cx.tx.push_ref(ptr.add(start as usize), seg, keep) };
                }
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_tail_rides_with_the_segment_before_it() {
        // A protobuf `bytes` field of 1 MiB: one segment, not 1 MiB and then 4 B.
        assert_eq!(segment(PLACE_CHUNK + 4, PLACE_CHUNK), PLACE_CHUNK + 4);
        assert_eq!(
            segment(PLACE_CHUNK + CHUNK, PLACE_CHUNK),
            PLACE_CHUNK + CHUNK
        );
        assert_eq!(segment(PLACE_CHUNK + CHUNK + 1, PLACE_CHUNK), PLACE_CHUNK);
        assert_eq!(
            segment(SPLIT_PLACE_CHUNK + 5, SPLIT_PLACE_CHUNK),
            SPLIT_PLACE_CHUNK + 5
        );
        assert_eq!(segment(3 * PLACE_CHUNK, PLACE_CHUNK), PLACE_CHUNK);
        assert_eq!(segment(17, PLACE_CHUNK), 17);
    }
}
