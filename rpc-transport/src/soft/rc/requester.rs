//! The requester half: turning send WQEs into frames, and ACKs, NAKs and responses
//! into completions, in WR order.

use std::sync::Arc;

use crate::mr_buffer::MrBuffer;
use crate::qp_state::rnr_timer_us;
use crate::wc::{WcStatus, WorkCompletion};
use crate::wr::{SendFlags, SendOp, Sge};

use crate::access::AccessFlags;

use super::super::mem::{self, ScatterError};
use super::super::pieces::{Pieces, PlanError};
use super::super::qp::wc_opcode;
use super::super::qp::wqe::{SendWqe, TxState};
use super::super::wire::{self, seq_lt, Atomic, Body, Lent, Nak, SEQ_MASK};
use super::responder::PLACE_CHUNK;
use super::tx::{CHUNK, COPY_MAX};
use super::{Fault, FrameContext};

/// `rnr_retry` 7 means retry forever.
const RNR_INFINITE: u8 = 7;

/// Applies a cumulative ACK.
pub(super) fn on_ack(cx: &mut FrameContext<'_>, ack: u32) {
    if seq_lt(cx.st.acked, ack) && !seq_lt(cx.st.next_seq, ack) {
        cx.st.acked = ack;
        cx.st.rnr_count = 0;
        cx.st.lending.release_acked(ack);
    }
}

/// Index of the transmitted (or transmitting) WQE with sequence number `seq`.
fn find(cx: &FrameContext<'_>, seq: u32) -> Option<usize> {
    let end = (cx.sq.tx + 1).min(cx.sq.len());
    (0..end).find(|&i| {
        let w = cx.sq.get(i);
        w.seq == seq
            && (w.state == TxState::Sent || (w.state == TxState::Pending && w.done_bytes > 0))
    })
}

pub(super) fn on_nak(cx: &mut FrameContext<'_>, seq: u32, nak: Nak) {
    if nak.ends_responder() {
        // The peer's responder is in ERR now (or about to be): it places (and takes)
        // nothing more.
        cx.st.placing.release_all();
        cx.st.lending.release_all();
    }
    if nak == Nak::QpError {
        // Not about one request: nothing outstanding will ever be answered.
        if cx.sq.len() > 0 && !cx.st.halted {
            fail(cx, 0, WcStatus::RetryExcErr);
        }
        return;
    }
    let Some(i) = find(cx, seq) else { return };
    let status = match nak {
        Nak::Rnr(code) => {
            if cx.attr.rnr_retry != RNR_INFINITE && cx.st.rnr_count >= cx.attr.rnr_retry {
                WcStatus::RnrRetryExcErr
            } else {
                cx.st.rnr_count = cx.st.rnr_count.saturating_add(1);
                rewind(cx, i);
                cx.st.rnr_until = Some(cx.now + u64::from(rnr_timer_us(code)) * 1000);
                return;
            }
        }
        Nak::SendBytes => {
            // The peer may not take bytes from this process: the message again, with
            // its bytes, at once; and no more loans on this connection.
            cx.st.lend_refused = true;
            rewind(cx, i);
            return;
        }
        Nak::InvalidRequest => WcStatus::RemInvReqErr,
        Nak::RemoteAccess => WcStatus::RemAccessErr,
        Nak::RemoteOp => WcStatus::RemOpErr,
        Nak::QpError => WcStatus::RetryExcErr,
    };
    cx.sq.get_mut(i).state = TxState::Failed(status);
    cx.st.halted = true;
}

/// Retransmits from WQE `i` on: the responder dropped everything after the NAK.
fn rewind(cx: &mut FrameContext<'_>, i: usize) {
    let end = (cx.sq.tx + 1).min(cx.sq.len());
    cx.st.next_seq = cx.sq.get(i).seq;
    for j in i..end {
        let w = cx.sq.get_mut(j);
        w.state = TxState::Pending;
        w.done_bytes = 0;
    }
    cx.sq.tx = i;
}

fn fail(cx: &mut FrameContext<'_>, i: usize, status: WcStatus) {
    cx.sq.get_mut(i).state = TxState::Failed(status);
    cx.st.halted = true;
}

/// The head of a Read response segment: finds the Read, checks its local SGEs for
/// the segment's bytes and points `into` at them.
pub(super) fn read_resp_head(
    cx: &mut FrameContext<'_>,
    h: &wire::Head,
    into: &mut Pieces,
) -> Result<(), Fault> {
    let Some(i) = find(cx, h.seq) else {
        return Ok(()); // a response to a WQE that already failed
    };
    let w = *cx.sq.get(i);
    if w.state != TxState::Sent || !matches!(w.op, SendOp::RdmaRead { .. }) {
        return Err(Fault::Broken);
    }
    if w.done_bytes + u64::from(h.len) > w.len {
        return Err(Fault::Broken);
    }
    let (keys, pd) = (&cx.qp.dev.keys, cx.qp.pd.id);
    let need = AccessFlags::LOCAL_WRITE;
    match into.resolve(keys, pd, w.sges(), w.done_bytes, h.len as usize, need) {
        Ok(()) => Ok(()),
        Err(PlanError::Prot(_)) => {
            fail(cx, i, WcStatus::LocProtErr);
            Ok(())
        }
        Err(PlanError::Len) => Err(Fault::Broken),
    }
}

/// A Read response segment has landed.
pub(super) fn read_resp_end(cx: &mut FrameContext<'_>, h: &wire::Head) -> Result<(), Fault> {
    if h.flags & wire::LAST != 0 {
        cx.st.placing.release_through(h.seq);
    }
    let Some(i) = find(cx, h.seq) else {
        return Ok(());
    };
    let w = cx.sq.get_mut(i);
    w.done_bytes += u64::from(h.len);
    if h.flags & wire::LAST != 0 {
        if w.done_bytes != w.len {
            return Err(Fault::Broken);
        }
        w.state = TxState::Done;
    }
    Ok(())
}

/// A Read response segment the peer placed itself (`READ_PLACED`): its bytes are
/// already in the destination this Read offered.
pub(super) fn read_placed(
    cx: &mut FrameContext<'_>,
    h: &wire::Head,
    len: u32,
) -> Result<(), Fault> {
    if !cx.st.placing.holds(h.seq) {
        // Placed into memory this side never offered (or no longer holds).
        return Err(Fault::Broken);
    }
    if h.flags & wire::LAST != 0 {
        cx.st.placing.release_through(h.seq);
    }
    let Some(i) = find(cx, h.seq) else {
        return Ok(()); // a response to a WQE that already failed
    };
    let w = cx.sq.get_mut(i);
    if w.state != TxState::Sent || !matches!(w.op, SendOp::RdmaRead { .. }) {
        return Err(Fault::Broken);
    }
    let s = &cx.qp.dev.stats.rc_read_bytes_placed_by_peer;
    s.fetch_add(u64::from(len), std::sync::atomic::Ordering::Relaxed);
    w.done_bytes += u64::from(len);
    if w.done_bytes > w.len {
        return Err(Fault::Broken);
    }
    if h.flags & wire::LAST != 0 {
        if w.done_bytes != w.len {
            return Err(Fault::Broken);
        }
        w.state = TxState::Done;
    }
    Ok(())
}

/// The next segment of a Send or Write WQE `w` as a loan: at most a placed segment
/// ([`PLACE_CHUNK`], what a message behind it waits for at the peer), within the SGE
/// it starts in, if that SGE is longer than a ring chunk and the range passes the
/// local checks; with the buffer to hold until the message is acknowledged. `None`:
/// the segment goes through the ring (where a bad lkey fails the WQE). So a header
/// SGE before a large body goes through the ring with the body's first bytes, and
/// the rest of the body is lent.
fn lendable(cx: &FrameContext<'_>, w: &SendWqe) -> Option<(Lent, Arc<MrBuffer>)> {
    let (sge, off) = sge_at(w.sges(), w.done_bytes)?;
    if sge.length as usize <= CHUNK {
        return None;
    }
    let seg = ((u64::from(sge.length) - off) as usize).min(PLACE_CHUNK);
    let (keys, pd) = (&cx.qp.dev.keys, cx.qp.pd.id);
    let at = sge.addr.checked_add(off)?;
    let r = keys
        .resolve(sge.lkey, pd, at, seg as u64, AccessFlags::empty())
        .ok()?;
    let lent = Lent {
        src: r.ptr as u64,
        len: seg as u32,
    };
    Some((lent, r.buf))
}

/// The SGE that byte `at` of a WQE's payload lies in, and `at`'s offset into it.
fn sge_at(sges: &[Sge], mut at: u64) -> Option<(&Sge, u64)> {
    for sge in sges {
        let len = u64::from(sge.length);
        if at < len {
            return Some((sge, at));
        }
        at -= len;
    }
    None
}

/// The Read WQE `i`'s destination, if the peer may place the response there: one
/// contiguous range that passes the local checks, held until the peer is done with
/// it. Otherwise the Read asks for the bytes on the link as usual (and a bad lkey
/// fails it when they arrive, as before).
fn offer_destination(cx: &mut FrameContext<'_>, i: usize, seq: u32) -> Option<u64> {
    let w = cx.sq.get(i);
    let [sge] = w.sges() else { return None };
    if w.len == 0 || u64::from(sge.length) != w.len {
        return None;
    }
    let (keys, pd) = (&cx.qp.dev.keys, cx.qp.pd.id);
    let r = keys
        .resolve(sge.lkey, pd, sge.addr, w.len, AccessFlags::LOCAL_WRITE)
        .ok()?;
    let at = r.ptr as u64;
    cx.st.placing.hold(seq, r.buf);
    Some(at)
}

pub(super) fn on_atomic_resp(cx: &mut FrameContext<'_>, seq: u32, orig: u64) -> Result<(), Fault> {
    let Some(i) = find(cx, seq) else {
        return Ok(());
    };
    let w = *cx.sq.get(i);
    if w.state != TxState::Sent
        || !matches!(w.op, SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. })
    {
        return Err(Fault::Broken);
    }
    // The original value lands in the local buffer in host order, as rxe does.
    match mem::scatter(
        &cx.qp.dev.keys,
        cx.qp.pd.id,
        w.sges(),
        0,
        &orig.to_ne_bytes(),
    ) {
        Ok(()) => cx.sq.get_mut(i).state = TxState::Done,
        Err(ScatterError::Prot(_)) => fail(cx, i, WcStatus::LocProtErr),
        Err(ScatterError::Len) => fail(cx, i, WcStatus::LocLenErr),
    }
    Ok(())
}

/// Completes finished WQEs at the head of the send queue, in order.
pub(super) fn complete(cx: &mut FrameContext<'_>) -> Result<(), Fault> {
    while cx.sq.len() > 0 {
        // Borrowed, not copied: most looks find the head still waiting for its ACK.
        let w = cx.sq.get(0);
        let ok = match w.state {
            TxState::Failed(st) => return Err(Fault::Send(st)),
            TxState::Done => true,
            TxState::Sent => {
                matches!(
                    w.op,
                    SendOp::Send
                        | SendOp::SendWithImm { .. }
                        | SendOp::RdmaWrite { .. }
                        | SendOp::RdmaWriteWithImm { .. }
                ) && seq_lt(w.seq, cx.st.acked)
            }
            TxState::Pending => false,
        };
        if !ok {
            break;
        }
        let (signaled, wr_id, opcode, len) = (w.signaled, w.wr_id, wc_opcode(&w.op), w.len);
        cx.sq.drop_head();
        cx.st.progress_at = cx.now;
        if signaled {
            let wc = WorkCompletion {
                wr_id,
                opcode,
                byte_len: len as u32,
                qp_num: cx.qp.qpn,
                ..WorkCompletion::default()
            };
            if !cx.qp.send_cq.push(wc, false) {
                return Err(Fault::Err);
            }
        }
    }
    Ok(())
}

/// RNR back-off expiry and the retry budget of a silent peer.
pub(super) fn timers(cx: &mut FrameContext<'_>) -> Result<(), Fault> {
    if let Some(t) = cx.st.rnr_until {
        if cx.now < t {
            return Ok(());
        }
        cx.st.rnr_until = None;
        cx.st.progress_at = cx.now;
    }
    if budget_spent(cx) {
        return Err(Fault::Send(WcStatus::RetryExcErr));
    }
    Ok(())
}

/// Whether WQEs wait and nothing was heard from the peer for the whole retry budget.
pub(super) fn budget_spent(cx: &FrameContext<'_>) -> bool {
    cx.sq.len() > 0
        && cx
            .budget_ns()
            .is_some_and(|b| cx.now.saturating_sub(cx.st.progress_at) > b)
}

/// Encodes frames for WQEs not yet (fully) transmitted, while the TX buffer has room.
pub(super) fn pump(cx: &mut FrameContext<'_>) {
    while cx.st.rnr_until.is_none() && !cx.st.halted && cx.sq.tx < cx.sq.len() && cx.tx.has_room() {
        let i = cx.sq.tx;
        // The fields this pass needs, not the whole WQE: a copy of its SGE array (16
        // entries) per message was most of this function's memory traffic. The SGEs
        // are read in place where the payload is gathered.
        let w = {
            let w = cx.sq.get(i);
            Wqe {
                op: w.op,
                flags: w.flags,
                len: w.len,
                inline: w.inline,
                state: w.state,
                done_bytes: w.done_bytes,
            }
        };
        if w.state != TxState::Pending {
            cx.sq.tx += 1;
            continue;
        }
        if w.done_bytes == 0 {
            // SQD: WQEs already started finish, new ones wait.
            if cx.state != crate::qp_state::QpState::Rts
                && cx.state != crate::qp_state::QpState::Sqe
            {
                break;
            }
            cx.sq.get_mut(i).seq = cx.st.next_seq;
        }
        let seq = cx.sq.get(i).seq;
        let sol = if w.flags.contains(SendFlags::SOLICITED) {
            wire::SOLICITED
        } else {
            0
        };
        let (body, imm) = match w.op {
            SendOp::Send => (Body::Send { imm: 0 }, false),
            SendOp::SendWithImm { imm } => (Body::Send { imm }, true),
            SendOp::RdmaWrite { remote_addr, rkey } => (
                Body::Write {
                    va: remote_addr.wrapping_add(w.done_bytes),
                    rkey,
                    imm: 0,
                },
                false,
            ),
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => (
                Body::Write {
                    va: remote_addr.wrapping_add(w.done_bytes),
                    rkey,
                    imm,
                },
                true,
            ),
            SendOp::RdmaRead { remote_addr, rkey } => {
                let place = if cx.st.offer_place {
                    offer_destination(cx, i, seq)
                } else {
                    None
                };
                let body = Body::ReadReq {
                    va: remote_addr,
                    rkey,
                    len: w.len as u32,
                    place,
                };
                cx.frame(0, seq, &body, 0);
                sent(cx, i);
                continue;
            }
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                let body = Body::AtomicReq {
                    va: remote_addr,
                    rkey,
                    op: Atomic::FetchAdd { add },
                };
                cx.frame(0, seq, &body, 0);
                sent(cx, i);
                continue;
            }
            SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                let body = Body::AtomicReq {
                    va: remote_addr,
                    rkey,
                    op: Atomic::CmpSwap { compare, swap },
                };
                cx.frame(0, seq, &body, 0);
                sent(cx, i);
                continue;
            }
            // Local WRs finish when posted (qp/post.rs) and are never Pending here.
            SendOp::BindMw(_) | SendOp::LocalInv { .. } => {
                cx.sq.tx += 1;
                continue;
            }
        };
        // Beyond a ring chunk, on shared memory, the peer takes the bytes itself.
        // Not smaller ones: `process_vm_readv` costs more than the ring's two copies
        // below about 32 KiB (measured with lending from 4 KiB on, rpc-bench echo x 16,
        // three rounds: CPU per call 8 KiB 10.9-13.1 -> 15.0-18.5 µs, 16 KiB 19.3-27.8
        // -> 29.1-39.8 µs; 32 KiB 29.5-35.8 -> 28.9-31.1 µs).
        let lent = if cx.st.lends() && !w.inline && w.len > CHUNK as u64 {
            lendable(cx, cx.sq.get(i))
        } else {
            None
        };
        let seg = match &lent {
            Some((l, _)) => l.len as usize,
            None => {
                let want = ((w.len - w.done_bytes) as usize).min(CHUNK);
                let seg = cx.tx.room_for(want);
                if seg < want.min(1) {
                    break; // no room for a useful piece: after the next flush
                }
                seg
            }
        };
        let last = w.done_bytes + seg as u64 == w.len;
        let mut flags = sol;
        if w.done_bytes == 0 {
            flags |= wire::FIRST;
        }
        if last {
            flags |= wire::LAST;
        }
        if imm {
            flags |= wire::IMM;
        }
        let off = w.done_bytes;
        if let Some((lent, keep)) = lent {
            let body = match body {
                Body::Send { imm } => Body::SendLent { imm, lent },
                Body::Write { va, rkey, imm } => Body::WriteLent {
                    va,
                    rkey,
                    imm,
                    lent,
                },
                _ => unreachable!("only Sends and Writes carry payload"),
            };
            cx.frame(flags, seq, &body, 0);
            cx.st.lending.hold(seq, keep);
            // Counted as written: a pass lends at most its write budget.
            cx.tx.placed += seg;
        } else if w.inline {
            // Inline payloads were copied at post time; they are small, so they are
            // copied once more rather than referenced (the ring may move them).
            cx.frame(flags, seq, &body, seg);
            let src = &cx.sq.inline_data(i)[off as usize..off as usize + seg];
            cx.tx.buf.extend_from_slice(src);
        } else if seg <= COPY_MAX {
            // Small: copied next to the head (cheaper than a reference; see COPY_MAX).
            let at = cx.tx.buf.len();
            cx.frame(flags, seq, &body, seg);
            let p = cx.tx.buf.len();
            cx.tx.buf.resize(p + seg, 0);
            let (keys, pd) = (&cx.qp.dev.keys, cx.qp.pd.id);
            let sges = cx.sq.get(i).sges();
            if mem::gather(keys, pd, sges, off, &mut cx.tx.buf[p..]).is_err() {
                cx.tx.buf.truncate(at);
                fail(cx, i, WcStatus::LocProtErr);
                return;
            }
        } else {
            let mut from = Pieces::discard();
            let (keys, pd) = (&cx.qp.dev.keys, cx.qp.pd.id);
            let need = AccessFlags::empty();
            if from
                .resolve(keys, pd, cx.sq.get(i).sges(), off, seg, need)
                .is_err()
            {
                fail(cx, i, WcStatus::LocProtErr);
                return;
            }
            cx.frame(flags, seq, &body, seg);
            let tx = &mut *cx.tx;
            // SAFETY: each piece is a checked range inside the buffer handed with it.
            from.take_each(|ptr, len, keep| unsafe { tx.push_ref(ptr, len, keep) });
        }
        cx.sq.get_mut(i).done_bytes += seg as u64;
        if last {
            sent(cx, i);
        }
    }
}

/// What [`pump`] reads of a send WQE, copied out of the queue (which the pass then
/// writes to).
struct Wqe {
    op: SendOp,
    flags: SendFlags,
    len: u64,
    inline: bool,
    state: TxState,
    done_bytes: u64,
}

fn sent(cx: &mut FrameContext<'_>, i: usize) {
    let w = cx.sq.get_mut(i);
    w.state = TxState::Sent;
    w.done_bytes = 0;
    cx.sq.tx = i + 1;
    cx.st.next_seq = (cx.st.next_seq + 1) & SEQ_MASK;
}
