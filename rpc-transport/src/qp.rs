//! Queue pairs: creation, state transitions and posting.

use std::net::IpAddr;
use std::sync::Arc;

use crate::access::AccessFlags;
use crate::addr::QpEndpoint;
use crate::ah::AhAttr;
use crate::cq::{CompletionQueue, CqImp};
use crate::dispatch::dispatch;
use crate::error::{Error, Result};
use crate::pd::{PdImp, ProtectionDomain};
use crate::qp_state::{Mtu, QpAttr, QpState, QpType};
use crate::soft;
use crate::srq::{SharedReceiveQueue, SrqImp};
use crate::wr::{RecvWr, SendWr};

/// Queue sizes (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    /// Outstanding send WRs.
    pub max_send_wr: u32,
    /// Outstanding receive WRs (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

/// Creation attributes (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy)]
pub struct QpInitAttr<'a> {
    /// RC or UD.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: &'a CompletionQueue,
    /// CQ for receive completions.
    pub recv_cq: &'a CompletionQueue,
    /// Take receives from this SRQ instead of an own receive queue.
    pub srq: Option<&'a SharedReceiveQueue>,
    /// Queue sizes.
    pub cap: QpCap,
    /// Every send WR completes with a CQE, whatever its `SIGNALED` flag.
    pub sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    /// Default capacities, selective signaling, no SRQ.
    pub fn new(
        qp_type: QpType,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
    ) -> Self {
        QpInitAttr {
            qp_type,
            send_cq,
            recv_cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }
}

pub(crate) enum QpImp {
    Soft(Arc<soft::Qp>),
    #[cfg(feature = "rdma")]
    Verbs(Arc<crate::verbs::Qp>),
}

/// Creates the provider QP once every object in `init` is known to come from the
/// same provider as the PD.
pub(crate) fn create_qp(pd: &PdImp, init: &QpInitAttr<'_>) -> Result<QpImp> {
    let srq = init.srq.map(|s| &s.imp);
    match (pd, &init.send_cq.imp, &init.recv_cq.imp, srq) {
        (PdImp::Soft(pd), CqImp::Soft(s), CqImp::Soft(r), None) => Ok(QpImp::Soft(pd.create_qp(
            init.qp_type,
            s,
            r,
            None,
            &init.cap,
            init.sq_sig_all,
        )?)),
        (PdImp::Soft(pd), CqImp::Soft(s), CqImp::Soft(r), Some(SrqImp::Soft(q))) => Ok(
            QpImp::Soft(pd.create_qp(init.qp_type, s, r, Some(q), &init.cap, init.sq_sig_all)?),
        ),
        #[cfg(feature = "rdma")]
        (PdImp::Verbs(pd), CqImp::Verbs(s), CqImp::Verbs(r), None) => Ok(QpImp::Verbs(
            pd.create_qp(init.qp_type, s, r, None, &init.cap, init.sq_sig_all)?,
        )),
        #[cfg(feature = "rdma")]
        (PdImp::Verbs(pd), CqImp::Verbs(s), CqImp::Verbs(r), Some(SrqImp::Verbs(q))) => Ok(
            QpImp::Verbs(pd.create_qp(init.qp_type, s, r, Some(q), &init.cap, init.sq_sig_all)?),
        ),
        #[allow(unreachable_patterns)]
        _ => Err(Error::ProviderMismatch),
    }
}

/// An RC QP's transport retry budget (ibverbs' `timeout` and `retry_cnt`): a send
/// unacknowledged for about `4.096 µs × 2^ack_timeout × (retry_cnt + 1)` fails
/// `RETRY_EXC_ERR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcRetry {
    /// The ACK timeout code (IBA: 4.096 µs × 2^code; 0 = wait forever).
    pub ack_timeout: u8,
    /// Retransmissions before the send fails (at most 7). The kernel's rxe takes 7
    /// as "retry forever" (`rxe_comp.c` decrements it only while it is not 7, as the
    /// IBA does for `rnr_retry` alone): there a send to a vanished peer never fails
    /// with 7, and 6 is the largest finite budget.
    pub retry_cnt: u8,
}

impl Default for RcRetry {
    /// 14 (~67 ms) and 7: about half a second, the common verbs setting.
    fn default() -> Self {
        RcRetry {
            ack_timeout: 14,
            retry_cnt: 7,
        }
    }
}

/// A queue pair (`ibv_qp`). It keeps its PD, CQs and SRQ alive.
pub struct QueuePair {
    pub(crate) imp: QpImp,
    qp_type: QpType,
    pd: ProtectionDomain,
    _cqs: (CqImp, CqImp),
    _srq: Option<SrqImp>,
}

impl QueuePair {
    pub(crate) fn new(imp: QpImp, init: &QpInitAttr<'_>, pd: &ProtectionDomain) -> Self {
        QueuePair {
            imp,
            qp_type: init.qp_type,
            pd: pd.clone(),
            _cqs: (init.send_cq.imp.clone(), init.recv_cq.imp.clone()),
            _srq: init.srq.map(|s| s.imp.clone()),
        }
    }

    /// QP number.
    pub fn qp_num(&self) -> u32 {
        dispatch!(&self.imp, QpImp, q => q.qp_num())
    }

    /// RC or UD.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Current state (a QP moves to ERR by itself on fatal errors).
    pub fn state(&self) -> QpState {
        dispatch!(&self.imp, QpImp, q => q.state())
    }

    /// Capacities actually granted.
    pub fn cap(&self) -> QpCap {
        dispatch!(&self.imp, QpImp, q => q.cap())
    }

    /// The protection domain it belongs to.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// Moves the QP to `to`, applying the `Some` fields of `attr`. Transitions the
    /// verbs state machine lacks, and missing required attributes, are errors.
    pub fn modify(&self, to: QpState, attr: &QpAttr) -> Result<()> {
        attr.check_transition(self.qp_type, self.state(), to)?;
        dispatch!(&self.imp, QpImp, q => q.modify(to, attr))
    }

    /// This QP as a peer must name it, with `psn` as its initial send PSN. On an
    /// iWARP device (RC QPs connect through rdma_cm there) `lid` is the port and `gid`
    /// the IPv4-mapped address of the device's rdma_cm listener, started by the first
    /// such call.
    pub fn endpoint(&self, psn: u32) -> Result<QpEndpoint> {
        let dev = self.pd.device();
        #[cfg(feature = "rdma")]
        if let QpImp::Verbs(q) = &self.imp {
            if let Some((lid, gid)) = q.cm_endpoint()? {
                let qpn = self.qp_num();
                return Ok(QpEndpoint { lid, qpn, psn, gid });
            }
        }
        Ok(QpEndpoint {
            lid: dev.port_attr(1)?.lid,
            qpn: self.qp_num(),
            psn,
            gid: dev.gid(1, dev.preferred_gid_index())?,
        })
    }

    /// This QP as a peer must name it when the endpoint travels over a connection
    /// whose local address is `local`: on a soft device serving every address of the
    /// host (bound to the unspecified address), the GID of `local`, so that the peer
    /// gets an address it can reach; it must be called before an RC QP is connected.
    /// Otherwise the same as [`QueuePair::endpoint`] (verbs: the preferred GID).
    pub fn endpoint_via(&self, psn: u32, local: IpAddr) -> Result<QpEndpoint> {
        let mut ep = self.endpoint(psn)?;
        match &self.imp {
            QpImp::Soft(q) => ep.gid = q.source_via(local),
            #[cfg(feature = "rdma")]
            QpImp::Verbs(_) => {}
        }
        Ok(ep)
    }

    /// RESET → INIT → RTR → RTS for an RC QP, connecting it to `remote`. `local_psn`
    /// must be the PSN published in this QP's own endpoint.
    pub fn connect_rc(
        &self,
        remote: &QpEndpoint,
        local_psn: u32,
        access: AccessFlags,
    ) -> Result<()> {
        self.connect_rc_with(remote, local_psn, access, RcRetry::default())
    }

    /// [`QueuePair::connect_rc`] with a transport retry budget of its own: how long
    /// the QP waits for an ACK before it retransmits, and how often, before its sends
    /// fail `RETRY_EXC_ERR` (a peer that stops answering for longer is declared dead).
    ///
    /// On iWARP this side is the initiator: the QP goes to INIT and is connected
    /// through rdma_cm to the listener `remote` names, whose side must have called
    /// [`QueuePair::accept_rc_with`] first; it returns once the connection is
    /// established. TCP's retransmission stands in for `retry` there. Its first
    /// message must precede any of the peer's (MPA's rule: the initiator sends first).
    pub fn connect_rc_with(
        &self,
        remote: &QpEndpoint,
        local_psn: u32,
        access: AccessFlags,
        retry: RcRetry,
    ) -> Result<()> {
        #[cfg(feature = "rdma")]
        if let QpImp::Verbs(q) = &self.imp {
            if q.needs_cm() {
                self.modify(QpState::Init, &QpAttr::rc_init(access))?;
                return q.cm_connect(remote);
            }
        }
        self.connect_by_hand(remote, local_psn, access, retry)
    }

    /// The passive side's [`QueuePair::connect_rc`]: the same on every fabric but
    /// iWARP, where the QP goes to INIT and the device's rdma_cm listener accepts the
    /// connect request of `remote`'s QP for it when it comes (this returns at once).
    pub fn accept_rc(
        &self,
        remote: &QpEndpoint,
        local_psn: u32,
        access: AccessFlags,
    ) -> Result<()> {
        self.accept_rc_with(remote, local_psn, access, RcRetry::default())
    }

    /// [`QueuePair::accept_rc`] with a retry budget ([`QueuePair::connect_rc_with`]).
    pub fn accept_rc_with(
        &self,
        remote: &QpEndpoint,
        local_psn: u32,
        access: AccessFlags,
        retry: RcRetry,
    ) -> Result<()> {
        #[cfg(feature = "rdma")]
        if let QpImp::Verbs(q) = &self.imp {
            if q.needs_cm() {
                self.modify(QpState::Init, &QpAttr::rc_init(access))?;
                return q.cm_expect(remote);
            }
        }
        self.connect_by_hand(remote, local_psn, access, retry)
    }

    /// RESET → INIT → RTR → RTS by `ibv_modify_qp`, as IB, RoCE and soft QPs connect.
    fn connect_by_hand(
        &self,
        remote: &QpEndpoint,
        local_psn: u32,
        access: AccessFlags,
        retry: RcRetry,
    ) -> Result<()> {
        let dev = self.pd.device();
        let mtu = dev.port_attr(1)?.active_mtu.min(Mtu::Mtu4096);
        let ah = AhAttr::from_endpoint(remote, dev.preferred_gid_index());
        self.modify(QpState::Init, &QpAttr::rc_init(access))?;
        self.modify(
            QpState::Rtr,
            &QpAttr::rc_rtr(ah, remote.qpn, remote.psn, mtu),
        )?;
        let rts = QpAttr {
            timeout: Some(retry.ack_timeout),
            retry_cnt: Some(retry.retry_cnt),
            ..QpAttr::rc_rts(local_psn)
        };
        self.modify(QpState::Rts, &rts)
    }

    /// RESET → INIT → RTR → RTS for a UD QP with Q_Key `qkey`.
    pub fn activate_ud(&self, qkey: u32, psn: u32) -> Result<()> {
        self.modify(QpState::Init, &QpAttr::ud_init(qkey))?;
        self.modify(QpState::Rtr, &QpAttr::default())?;
        self.modify(QpState::Rts, &QpAttr::ud_rts(psn))
    }

    /// Posts a list of send WRs in one call (one doorbell). On a synchronous refusal
    /// the WRs before the failing index were posted ([`Error::Post`]).
    ///
    /// # Safety
    /// Every SGE of a WR without `INLINE` must name memory of a live memory region of
    /// this PD that stays registered and that the program does not write (for RDMA
    /// Read and atomics: neither reads nor writes) until the WR's completion is polled,
    /// or, for an unsignaled WR, until a later signaled WR of this QP completes (or the
    /// QP is destroyed). Inline SGEs must be readable for the duration of the call.
    pub unsafe fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        // SAFETY: forwarded contract.
        dispatch!(&self.imp, QpImp, q => unsafe { q.post_send(wrs) })
    }

    /// Posts a list of receive WRs in one call.
    ///
    /// # Safety
    /// Every SGE must name memory of a live memory region of this PD that the program
    /// neither reads nor writes, and that stays registered, until the receive's
    /// completion is polled (or the QP is destroyed).
    pub unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        // SAFETY: forwarded contract.
        dispatch!(&self.imp, QpImp, q => unsafe { q.post_recv(wrs) })
    }
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &self.qp_num())
            .field("type", &self.qp_type)
            .field("state", &self.state())
            .finish()
    }
}
