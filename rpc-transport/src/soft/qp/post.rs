//! Posting work requests: the synchronous checks ibverbs makes (state, SGE count,
//! inline size, opcode for the QP type, queue room), then the RC send queue or an
//! immediate UD transmission.

use std::collections::VecDeque;

use crate::error::{PostError, Result};
use crate::qp_state::{QpState, QpType};
use crate::wc::{WcOpcode, WcStatus};
use crate::wr::{RecvWr, SendFlags, SendOp, SendWr};

use super::super::{rc, ud};
use super::wqe::{refuse, RecvWqe, TxState};
use super::{wc_opcode, Inner, Qp};

impl Qp {
    /// # Safety
    /// See [`crate::QueuePair::post_send`].
    pub(crate) unsafe fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        let mut g = self.lock();
        self.check_cqs(&mut g);
        // One clock read per post (each costs about a hundred instructions).
        let now = self.dev.now_ns();
        if g.sq.len() == 0 {
            // The retry budget counts from the moment there is something to wait for.
            if let Some(rc) = g.rc.as_mut() {
                rc.st.progress_at = now;
            }
        }
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(reason) = self.check_send(&g, wr) {
                result = Err(refuse(index, reason));
                break;
            }
            let signaled = self.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
            if g.state == QpState::Err {
                self.push_send(wr.wr_id, WcStatus::WrFlushErr, wc_opcode(&wr.opcode), 0);
                continue;
            }
            match self.qp_type {
                QpType::Rc => {
                    // SAFETY: forwarded contract (inline SGEs readable during the call).
                    if let Err(reason) = unsafe {
                        g.sq.push(wr.wr_id, wr.opcode, wr.flags, signaled, wr.sg_list)
                    } {
                        result = Err(refuse(index, reason));
                        break;
                    }
                    if let Some(done) = self.run_local(&wr.opcode) {
                        let last = g.sq.len() - 1;
                        g.sq.get_mut(last).state = done;
                    }
                }
                QpType::Ud => {
                    // SAFETY: forwarded contract.
                    let status = unsafe { ud::send(self, &mut g, wr) };
                    if status != WcStatus::Success {
                        self.push_send(wr.wr_id, status, WcOpcode::Send, 0);
                        self.enter_err(&mut g, None, false);
                    } else if signaled {
                        let len = wr.total_len() as u32;
                        if !self.push_send(wr.wr_id, status, WcOpcode::Send, len) {
                            self.enter_err(&mut g, None, false);
                        }
                    }
                }
            }
        }
        if self.qp_type == QpType::Rc {
            let needs = rc::kick(self, &mut g, now);
            self.after_rc_pass(&g, needs);
        }
        result
    }

    /// Executes a bind or an invalidation now, in the key table; `None` for WRs that
    /// go to the peer. The WQE then waits in the send queue, already finished, for
    /// its in-order completion (the requester skips it). Executing at post rather
    /// than when earlier WRs finish changes nothing a peer can observe: those WRs
    /// never use a window, and a peer learns a window's key only from a later WR.
    fn run_local(&self, op: &SendOp) -> Option<TxState> {
        let keys = &self.dev.keys;
        let r = match op {
            SendOp::BindMw(b) => keys
                .bind_mw(self.pd.id, self.qpn, b)
                .map_err(|_| WcStatus::MwBindErr),
            SendOp::LocalInv { rkey } => keys
                .invalidate(self.pd.id, *rkey)
                .map_err(|_| WcStatus::LocQpOpErr),
            _ => return None,
        };
        Some(match r {
            Ok(()) => TxState::Done,
            Err(st) => TxState::Failed(st),
        })
    }

    fn check_send(&self, g: &Inner, wr: &SendWr<'_>) -> std::result::Result<(), PostError> {
        if matches!(g.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(PostError::InvalidState);
        }
        if wr.sg_list.len() > self.cap.max_send_sge as usize {
            return Err(PostError::TooManySges);
        }
        if wr.flags.contains(SendFlags::INLINE)
            && wr.total_len() > u64::from(self.cap.max_inline_data)
        {
            return Err(PostError::InlineTooLarge);
        }
        self.dev.profile.check_op(&wr.opcode)?;
        match self.qp_type {
            QpType::Rc if wr.ud.is_some() => Err(PostError::BadDestination),
            QpType::Ud if wr.ud.is_none() => Err(PostError::BadDestination),
            QpType::Ud if !matches!(wr.opcode, SendOp::Send | SendOp::SendWithImm { .. }) => {
                Err(PostError::InvalidOpcode)
            }
            QpType::Ud if !matches!(wr.ud.map(|u| &u.ah.imp), Some(crate::ah::AhImp::Soft(_))) => {
                Err(PostError::BadDestination)
            }
            QpType::Rc if wr.total_len() > 1 << 31 => Err(PostError::Os(libc::EINVAL)),
            _ => Ok(()),
        }
    }

    /// # Safety
    /// See [`crate::QueuePair::post_recv`].
    pub(crate) unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        let mut g = self.lock();
        self.check_cqs(&mut g);
        for (index, wr) in wrs.iter().enumerate() {
            if self.srq.is_some() || g.state == QpState::Reset {
                return Err(refuse(index, PostError::InvalidState));
            }
            if wr.sg_list.len() > self.cap.max_recv_sge as usize {
                return Err(refuse(index, PostError::TooManySges));
            }
            if g.state == QpState::Err {
                self.push_recv_error(wr.wr_id, WcStatus::WrFlushErr);
                continue;
            }
            if g.rq.len() >= self.cap.max_recv_wr as usize {
                return Err(refuse(index, PostError::QueueFull));
            }
            g.rq.push_back(RecvWqe::new(wr));
        }
        Ok(())
    }

    /// As [`Qp::take_recv`], copying the receive straight into `dst` (one copy of
    /// the WQE instead of a move per layer); returns its PD.
    pub(crate) fn take_recv_into(
        &self,
        rq: &mut VecDeque<RecvWqe>,
        dst: &mut RecvWqe,
    ) -> Option<u32> {
        match &self.srq {
            Some(s) => s.take_into(dst).then_some(s.pd),
            None => {
                dst.copy_from(rq.front()?);
                rq.pop_front();
                Some(self.pd.id)
            }
        }
    }

    /// Takes the next receive (from the SRQ if attached), with the PD its SGEs are
    /// checked against.
    pub(crate) fn take_recv(&self, rq: &mut VecDeque<RecvWqe>) -> Option<(RecvWqe, u32)> {
        let mut wqe = RecvWqe::EMPTY;
        let pd = self.take_recv_into(rq, &mut wqe)?;
        Some((wqe, pd))
    }
}
