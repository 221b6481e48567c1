//! Posting WR lists: one linked `ibv_send_wr` / `ibv_recv_wr` chain per call (one
//! doorbell), built on the stack for up to [`STACK_WRS`] WRs.
//!
//! Gather lists are not copied: [`Sge`] has the layout of `struct ibv_sge` (checked at
//! compile time below), so each WR points at the caller's slice.
//!
//! ibverbs' `bad_wr` semantics are kept: WRs before the failing one are posted. WRs we
//! can tell are invalid without the provider (too many SGEs, inline too large, wrong
//! destination or opcode for the QP type, a UD message over the MTU) end the chain early, the valid prefix is
//! posted, and the error names the first refused index.

use std::mem::{align_of, offset_of, size_of, MaybeUninit};
use std::os::raw::c_int;
use std::ptr;

use super::error::{errno_of, post_reason};
use super::ffi;
use super::{Qp, Srq};
use crate::ah::AhImp;
use crate::error::{Error, PostError, Result};
use crate::qp_state::{QpState, QpType};
use crate::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge};

/// WRs per post that need no heap allocation.
const STACK_WRS: usize = 16;

const _: () = {
    assert!(size_of::<Sge>() == size_of::<ffi::ibv_sge>());
    assert!(align_of::<Sge>() == align_of::<ffi::ibv_sge>());
    assert!(offset_of!(Sge, addr) == offset_of!(ffi::ibv_sge, addr));
    assert!(offset_of!(Sge, length) == offset_of!(ffi::ibv_sge, length));
    assert!(offset_of!(Sge, lkey) == offset_of!(ffi::ibv_sge, lkey));
};

/// Plain C structs for which all-zero bytes are a valid value.
///
/// # Safety
/// Implementors must be valid when zeroed (integers, raw pointers, unions of those).
unsafe trait Zeroable: Sized {}
// SAFETY: integers, raw pointers and unions of them.
unsafe impl Zeroable for ffi::ibv_send_wr {}
// SAFETY: integers and raw pointers.
unsafe impl Zeroable for ffi::ibv_recv_wr {}

/// WR structs linked through their `next` field.
trait Linked: Zeroable {
    fn set_next(&mut self, next: *mut Self);
}

impl Linked for ffi::ibv_send_wr {
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

impl Linked for ffi::ibv_recv_wr {
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

/// Runs `f` on `n` zeroed slots: the head of an uninitialised stack array for
/// `n <= STACK_WRS` (only those `n` are zeroed: a one-WR post clears one WR), else one
/// `Vec`.
fn with_zeroed<T: Zeroable, R>(n: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    if n <= STACK_WRS {
        let mut slots: [MaybeUninit<T>; STACK_WRS] = [const { MaybeUninit::uninit() }; STACK_WRS];
        // SAFETY: `n <= STACK_WRS` slots are zeroed, which is a valid `T` (`Zeroable`);
        // `T` needs no drop (plain C data), so `MaybeUninit` not dropping it is fine.
        let head = unsafe {
            ptr::write_bytes(slots.as_mut_ptr(), 0, n);
            std::slice::from_raw_parts_mut(slots.as_mut_ptr().cast::<T>(), n)
        };
        f(head)
    } else {
        // SAFETY: `T: Zeroable`, so all-zero bytes are a valid `T`.
        let mut slots: Vec<T> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        f(&mut slots)
    }
}

/// Fills a chain from `wrs`, posts its valid prefix with `post`, and maps failures.
///
/// `post(head, &mut bad)` must call the provider's post verb and return its result.
/// `state_refuses()` tells whether the QP's current state explains an `EINVAL`.
fn post_chain<W, T: Linked>(
    wrs: &[W],
    mut fill: impl FnMut(&mut T, &W) -> std::result::Result<(), PostError>,
    post: impl FnOnce(*mut T, &mut *mut T) -> c_int,
    state_refuses: impl FnOnce() -> bool,
) -> Result<()> {
    if wrs.is_empty() {
        return Ok(());
    }
    with_zeroed(wrs.len(), |chain: &mut [T]| {
        let mut valid = wrs.len();
        let mut refused = None;
        for (i, (slot, wr)) in chain.iter_mut().zip(wrs).enumerate() {
            if let Err(reason) = fill(slot, wr) {
                valid = i;
                refused = Some(reason);
                break;
            }
        }
        if valid > 0 {
            let base = chain.as_mut_ptr();
            for i in 0..valid - 1 {
                // SAFETY: `i + 1 < valid <= chain.len()`: both are in the slice.
                unsafe { (*base.add(i)).set_next(base.add(i + 1)) };
            }
            let mut bad: *mut T = ptr::null_mut();
            let ret = post(base, &mut bad);
            if ret != 0 {
                let index = (bad as usize)
                    .checked_sub(base as usize)
                    .map(|off| off / size_of::<T>())
                    .filter(|&i| i < valid)
                    .unwrap_or(0);
                let errno = errno_of(ret);
                let state = errno == libc::EINVAL && state_refuses();
                return Err(Error::Post {
                    index,
                    reason: post_reason(errno, state),
                });
            }
        }
        match refused {
            Some(reason) => Err(Error::Post {
                index: valid,
                reason,
            }),
            None => Ok(()),
        }
    })
}

/// The gather/scatter list pointer of a WR. Providers only read it (the C prototype
/// lacks `const`).
fn sge_ptr(list: &[Sge]) -> *mut ffi::ibv_sge {
    if list.is_empty() {
        ptr::null_mut()
    } else {
        list.as_ptr().cast_mut().cast()
    }
}

/// Checks `wr` against the QP and writes it into `raw` (zeroed).
fn fill_send(
    raw: &mut ffi::ibv_send_wr,
    wr: &SendWr<'_>,
    qp: &Qp,
) -> std::result::Result<(), PostError> {
    use ffi::ibv_wr_opcode as O;
    let cap = qp.cap();
    if wr.sg_list.len() > cap.max_send_sge as usize {
        return Err(PostError::TooManySges);
    }
    if wr.flags.contains(SendFlags::INLINE) && wr.total_len() > u64::from(cap.max_inline_data) {
        return Err(PostError::InlineTooLarge);
    }
    match (qp.qp_type(), &wr.ud) {
        (QpType::Rc, None) => {}
        (QpType::Ud, Some(dest)) => {
            if !matches!(wr.opcode, SendOp::Send | SendOp::SendWithImm { .. }) {
                return Err(PostError::InvalidOpcode);
            }
            let max = qp.ud_max_msg();
            if max != 0 && wr.total_len() > u64::from(max) {
                return Err(PostError::MessageTooLarge);
            }
            let AhImp::Verbs(ah) = &dest.ah.imp else {
                return Err(PostError::BadDestination); // an AH of another provider
            };
            raw.wr.ud = ffi::ud_t {
                ah: ah.raw(),
                remote_qpn: dest.remote_qpn,
                remote_qkey: dest.remote_qkey,
            };
        }
        _ => return Err(PostError::BadDestination),
    }
    raw.wr_id = wr.wr_id;
    raw.sg_list = sge_ptr(wr.sg_list);
    raw.num_sge = wr.sg_list.len() as c_int;
    raw.send_flags = send_flags_to_raw(wr.flags);
    let rdma = |remote_addr, rkey| ffi::wr_t {
        rdma: ffi::rdma_t { remote_addr, rkey },
    };
    raw.opcode = match wr.opcode {
        SendOp::Send => O::IBV_WR_SEND,
        SendOp::SendWithImm { imm } => {
            raw.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            O::IBV_WR_SEND_WITH_IMM
        }
        SendOp::RdmaWrite { remote_addr, rkey } => {
            raw.wr = rdma(remote_addr, rkey);
            O::IBV_WR_RDMA_WRITE
        }
        SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => {
            raw.wr = rdma(remote_addr, rkey);
            raw.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            O::IBV_WR_RDMA_WRITE_WITH_IMM
        }
        SendOp::RdmaRead { remote_addr, rkey } => {
            raw.wr = rdma(remote_addr, rkey);
            O::IBV_WR_RDMA_READ
        }
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            raw.wr.atomic = ffi::atomic_t {
                remote_addr,
                compare_add: add,
                swap: 0,
                rkey,
            };
            O::IBV_WR_ATOMIC_FETCH_AND_ADD
        }
        SendOp::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            raw.wr.atomic = ffi::atomic_t {
                remote_addr,
                compare_add: compare,
                swap,
                rkey,
            };
            O::IBV_WR_ATOMIC_CMP_AND_SWP
        }
        SendOp::BindMw(b) => {
            raw.bind_mw_tso_union.bind_mw = ffi::bind_mw_t {
                mw: b.mw as *mut ffi::ibv_mw,
                rkey: b.rkey,
                bind_info: ffi::ibv_mw_bind_info {
                    mr: b.mr as *mut ffi::ibv_mr,
                    addr: b.addr,
                    length: b.len,
                    mw_access_flags: super::mr::access_to_raw(b.access) as u32,
                },
            };
            O::IBV_WR_BIND_MW
        }
        SendOp::LocalInv { rkey } => {
            raw.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
            O::IBV_WR_LOCAL_INV
        }
    };
    Ok(())
}

fn send_flags_to_raw(f: SendFlags) -> u32 {
    use ffi::ibv_send_flags as F;
    let mut raw = 0;
    for (ours, theirs) in [
        (SendFlags::FENCE, F::IBV_SEND_FENCE),
        (SendFlags::SIGNALED, F::IBV_SEND_SIGNALED),
        (SendFlags::SOLICITED, F::IBV_SEND_SOLICITED),
        (SendFlags::INLINE, F::IBV_SEND_INLINE),
    ] {
        if f.contains(ours) {
            raw |= theirs.0;
        }
    }
    raw
}

fn fill_recv(
    raw: &mut ffi::ibv_recv_wr,
    wr: &RecvWr<'_>,
    max_sge: u32,
) -> std::result::Result<(), PostError> {
    if wr.sg_list.len() > max_sge as usize {
        return Err(PostError::TooManySges);
    }
    raw.wr_id = wr.wr_id;
    raw.sg_list = sge_ptr(wr.sg_list);
    raw.num_sge = wr.sg_list.len() as c_int;
    Ok(())
}

/// # Safety
/// The neutral `QueuePair::post_send` contract: every non-inline SGE names registered
/// memory that stays owned until the WR completes.
pub(super) unsafe fn post_send(qp: &Qp, wrs: &[SendWr<'_>]) -> Result<()> {
    let r = post_chain(
        wrs,
        |raw, wr| fill_send(raw, wr, qp),
        // SAFETY: live QP; `head` is a well-formed, null-terminated chain whose SGE
        // lists borrow `wrs` for this call; the memory they name is covered by the
        // caller's contract; inline payloads are copied before the verb returns.
        |head, bad| unsafe { ffi::ibv_post_send(qp.raw(), head, bad) },
        || !matches!(qp.state(), QpState::Rts | QpState::Sqd),
    );
    super::caps::name_unsupported(qp.pd.device(), wrs, r)
}

/// # Safety
/// The neutral `QueuePair::post_recv` contract.
pub(super) unsafe fn post_recv(qp: &Qp, wrs: &[RecvWr<'_>]) -> Result<()> {
    // With an SRQ the QP has no receive queue: let the provider refuse such posts.
    let max_sge = if qp.has_srq() {
        u32::MAX
    } else {
        qp.cap().max_recv_sge
    };
    post_chain(
        wrs,
        |raw, wr| fill_recv(raw, wr, max_sge),
        // SAFETY: live QP; well-formed chain as in `post_send`; the scatter memory is
        // covered by the caller's contract.
        |head, bad| unsafe { ffi::ibv_post_recv(qp.raw(), head, bad) },
        || qp.state() == QpState::Reset,
    )
}

/// # Safety
/// The neutral `SharedReceiveQueue::post_recv` contract.
pub(super) unsafe fn post_srq_recv(srq: &Srq, wrs: &[RecvWr<'_>], max_sge: u32) -> Result<()> {
    post_chain(
        wrs,
        |raw, wr| fill_recv(raw, wr, max_sge),
        // SAFETY: live SRQ; well-formed chain as in `post_send`.
        |head, bad| unsafe { ffi::ibv_post_srq_recv(srq.raw(), head, bad) },
        || false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv_chain(n: usize, fail_at: Option<usize>) -> (Result<()>, Vec<(u64, usize)>) {
        let sges = [Sge {
            addr: 0x1000,
            length: 64,
            lkey: 9,
        }];
        let wrs: Vec<RecvWr<'_>> = (0..n as u64)
            .map(|wr_id| RecvWr {
                wr_id,
                sg_list: if Some(wr_id as usize) == fail_at {
                    &[]
                } else {
                    &sges
                },
            })
            .collect();
        let mut seen = Vec::new();
        let res = post_chain(
            &wrs,
            |raw: &mut ffi::ibv_recv_wr, wr| {
                if wr.sg_list.is_empty() {
                    return Err(PostError::TooManySges);
                }
                fill_recv(raw, wr, 1)
            },
            |head, _bad| {
                let mut p = head;
                while !p.is_null() {
                    // SAFETY: the chain built by post_chain is null-terminated.
                    let wr = unsafe { &*p };
                    seen.push((wr.wr_id, wr.num_sge as usize));
                    assert_eq!(wr.sg_list as *const Sge, sges.as_ptr(), "SGEs not copied");
                    p = wr.next;
                }
                0
            },
            || false,
        );
        (res, seen)
    }

    #[test]
    fn whole_list_goes_in_one_chain_on_stack_and_heap() {
        for n in [1, STACK_WRS, STACK_WRS + 3] {
            let (res, seen) = recv_chain(n, None);
            assert!(res.is_ok());
            assert_eq!(seen.len(), n);
            assert!(seen
                .iter()
                .enumerate()
                .all(|(i, &(id, k))| id == i as u64 && k == 1));
        }
    }

    #[test]
    fn invalid_wr_posts_prefix_and_names_its_index() {
        let (res, seen) = recv_chain(5, Some(3));
        assert_eq!(seen.len(), 3, "WRs before the bad one are posted");
        assert!(matches!(
            res,
            Err(Error::Post {
                index: 3,
                reason: PostError::TooManySges
            })
        ));
        let (res, seen) = recv_chain(2, Some(0));
        assert!(seen.is_empty(), "nothing posted before index 0");
        assert!(matches!(res, Err(Error::Post { index: 0, .. })));
    }

    #[test]
    fn provider_bad_wr_becomes_index() {
        let wrs: Vec<RecvWr<'_>> = (0..4)
            .map(|wr_id| RecvWr {
                wr_id,
                sg_list: &[],
            })
            .collect();
        let res = post_chain(
            &wrs,
            |raw: &mut ffi::ibv_recv_wr, wr| fill_recv(raw, wr, 1),
            |head, bad| {
                // SAFETY: a 4-element chain; the provider rejects the third WR.
                *bad = unsafe { head.add(2) };
                libc::ENOMEM
            },
            || false,
        );
        assert!(matches!(
            res,
            Err(Error::Post {
                index: 2,
                reason: PostError::QueueFull
            })
        ));
    }

    #[test]
    fn send_flags_are_ibverbs_bits() {
        assert_eq!(
            send_flags_to_raw(SendFlags::SIGNALED | SendFlags::INLINE),
            2 | 8
        );
        assert_eq!(
            send_flags_to_raw(SendFlags::FENCE | SendFlags::SOLICITED),
            1 | 4
        );
    }
}
