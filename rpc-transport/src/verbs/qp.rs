//! Queue pairs (`ibv_qp`): creation, state transitions, and the entry points of posting.

use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use super::ah::ah_attr_to_raw;
use super::cm::{self, CmId, Listener, Private};
use super::device::mtu_to_raw;
use super::error::{check, last_error};
use super::ffi;
use super::mr::access_to_raw;
use super::post;
use super::{Cq, Pd, Srq};
use crate::addr::{Gid, QpEndpoint};
use crate::error::{Error, Result};
use crate::qp::QpCap;
use crate::qp_state::{QpAttr, QpState, QpType};
use crate::wr::{RecvWr, SendWr};

/// A queue pair. It holds its PD, CQs and SRQ: the QP must be destroyed before any of
/// them, which `Drop` order guarantees (`Drop::drop` runs before the fields drop).
pub(crate) struct Qp {
    qp: NonNull<ffi::ibv_qp>,
    qp_type: QpType,
    cap: QpCap,
    has_srq: bool,
    /// UD: the port the QP was bound to at INIT (1 until then).
    port: AtomicU8,
    /// UD: the largest message, the port's active MTU, learnt at RTS (0 = unknown).
    ud_max_msg: AtomicU32,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
    _srq: Option<Arc<Srq>>,
    /// iWARP: the rdma_cm side of the connection (see `cm`).
    cm: Mutex<QpCm>,
    /// iWARP: the state as this side last set it (an `ibv_qp_state`), because `siw`'s
    /// `ibv_query_qp` does not report one (`siw_query_qp` leaves `qp_state` 0, RESET).
    /// Shared with the listener, which moves it to RTS when it accepts.
    known: Arc<AtomicU32>,
    pub(super) pd: Arc<Pd>,
}

/// How an iWARP QP is connected: by its own cm_id, or by the device's listener.
enum QpCm {
    None,
    Active(CmId),
    Passive(Arc<Listener>),
}

// SAFETY: ibv_post_send/recv, ibv_modify_qp and ibv_query_qp are thread-safe in
// libibverbs (providers lock the queues); the other fields are immutable.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Qp {
    pub(super) fn create(
        pd: &Arc<Pd>,
        qp_type: QpType,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        srq: Option<&Arc<Srq>>,
        cap: &QpCap,
        sq_sig_all: bool,
    ) -> Result<Arc<Qp>> {
        let mut init = ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send_cq.raw(),
            recv_cq: recv_cq.raw(),
            srq: srq.map_or(ptr::null_mut(), |s| s.raw()),
            cap: ffi::ibv_qp_cap {
                max_send_wr: cap.max_send_wr,
                // With an SRQ the QP has no receive queue of its own.
                max_recv_wr: if srq.is_some() { 0 } else { cap.max_recv_wr },
                max_send_sge: cap.max_send_sge,
                max_recv_sge: if srq.is_some() { 0 } else { cap.max_recv_sge },
                max_inline_data: cap.max_inline_data,
            },
            qp_type: match qp_type {
                QpType::Rc => ffi::ibv_qp_type::IBV_QPT_RC,
                QpType::Ud => ffi::ibv_qp_type::IBV_QPT_UD,
            },
            sq_sig_all: i32::from(sq_sig_all),
        };
        // SAFETY: live PD; the CQs and SRQ are live objects of the same context, kept
        // alive by the returned QP; `init` is initialised and receives the granted caps.
        let qp = NonNull::new(unsafe { ffi::ibv_create_qp(pd.raw(), &mut init) })
            .ok_or_else(|| last_error("ibv_create_qp"))?;
        // ibv_create_qp writes the granted capacities (>= those asked) back into `init`.
        let c = init.cap;
        Ok(Arc::new(Qp {
            qp,
            qp_type,
            cap: QpCap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
            has_srq: srq.is_some(),
            port: AtomicU8::new(1),
            ud_max_msg: AtomicU32::new(0),
            _send_cq: send_cq.clone(),
            _recv_cq: recv_cq.clone(),
            _srq: srq.cloned(),
            cm: Mutex::new(QpCm::None),
            known: Arc::new(AtomicU32::new(ffi::ibv_qp_state::IBV_QPS_RESET)),
            pd: pd.clone(),
        }))
    }

    pub(super) fn raw(&self) -> *mut ffi::ibv_qp {
        self.qp.as_ptr()
    }

    pub(super) fn qp_type(&self) -> QpType {
        self.qp_type
    }

    pub(super) fn has_srq(&self) -> bool {
        self.has_srq
    }

    /// The longest UD message the port carries (0 = unknown: not yet at RTS).
    pub(super) fn ud_max_msg(&self) -> u32 {
        self.ud_max_msg.load(Ordering::Relaxed)
    }

    pub(crate) fn qp_num(&self) -> u32 {
        // SAFETY: live QP; `qp_num` is fixed at creation.
        unsafe { (*self.raw()).qp_num }
    }

    /// Whether this QP connects through rdma_cm (an RC QP of an iWARP device).
    pub(crate) fn needs_cm(&self) -> bool {
        self.qp_type == QpType::Rc && self.pd.device().needs_cm()
    }

    /// iWARP: what the endpoint names instead of a LID and GID: the port and the
    /// IPv4-mapped address of the device's rdma_cm listener. `None` elsewhere.
    pub(crate) fn cm_endpoint(&self) -> Result<Option<(u16, Gid)>> {
        if !self.needs_cm() {
            return Ok(None);
        }
        let addr = self.pd.device().cm_listener()?.addr();
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&addr.ip().octets());
        Ok(Some((addr.port(), Gid(gid))))
    }

    /// The active side: connects this QP (at INIT) to `remote` through its device's
    /// listener; returns once established (the driver moved the QP to RTS).
    pub(crate) fn cm_connect(&self, remote: &QpEndpoint) -> Result<()> {
        let dst = cm::endpoint_addr(remote).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "the peer's endpoint names no rdma_cm listener (lid {}, gid {:02x?}); an \
                 iWARP QP connects only to an iWARP peer's endpoint",
                remote.lid, remote.gid.0
            ))
        })?;
        let me = self.qp_num();
        let id = cm::connect(
            me,
            dst,
            Private {
                to: remote.qpn,
                from: me,
            },
        )?;
        *self.cm.lock().unwrap_or_else(|p| p.into_inner()) = QpCm::Active(id);
        self.known
            .store(ffi::ibv_qp_state::IBV_QPS_RTS, Ordering::Relaxed);
        Ok(())
    }

    /// The passive side: the device's listener accepts `remote`'s connect request for
    /// this QP (at INIT) when it comes; returns at once.
    pub(crate) fn cm_expect(&self, remote: &QpEndpoint) -> Result<()> {
        let l = self.pd.device().cm_listener()?;
        l.expect(self.qp_num(), remote.qpn, self.known.clone());
        *self.cm.lock().unwrap_or_else(|p| p.into_inner()) = QpCm::Passive(l);
        Ok(())
    }

    /// The state as the device sees it (a QP moves to ERR on its own), queried each time.
    pub(crate) fn state(&self) -> QpState {
        if self.needs_cm() {
            // A move to ERR the device makes by itself is not seen here; completions
            // with an error status and `IBV_EVENT_QP_FATAL` still report it.
            return state_from_raw(self.known.load(Ordering::Relaxed));
        }
        let mut attr = MaybeUninit::<ffi::ibv_qp_attr>::zeroed();
        let mut init = MaybeUninit::<ffi::ibv_qp_init_attr>::zeroed();
        // SAFETY: live QP; both out-structs are writable and zero-initialised.
        let ret = unsafe {
            ffi::ibv_query_qp(
                self.raw(),
                attr.as_mut_ptr(),
                ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
                init.as_mut_ptr(),
            )
        };
        if ret != 0 {
            // Only a destroyed or broken context fails here; treat the QP as unusable.
            tracing::warn!(ret, qp_num = self.qp_num(), "ibv_query_qp failed");
            return QpState::Err;
        }
        // SAFETY: zero-initialised plain data, `qp_state` filled in by the verb.
        state_from_raw(unsafe { attr.assume_init_ref() }.qp_state)
    }

    pub(crate) fn cap(&self) -> QpCap {
        self.cap
    }

    pub(crate) fn modify(&self, to: QpState, attr: &QpAttr) -> Result<()> {
        let (mut raw, mask) = qp_attr_to_raw(to, attr);
        // SAFETY: live QP; `raw` is initialised, and `mask` names only fields set in it.
        check("ibv_modify_qp", unsafe {
            ffi::ibv_modify_qp(self.raw(), &mut raw, mask.0 as i32)
        })?;
        self.known
            .store(to as ffi::ibv_qp_state::Type, Ordering::Relaxed);
        if self.qp_type == QpType::Ud {
            if let Some(port) = attr.port_num {
                self.port.store(port, Ordering::Relaxed);
            }
            if to == QpState::Rts {
                // rxe completes an over-MTU UD send as successful and sends nothing
                // (IBA C10-93.1.1 allows it); remember the MTU to refuse such posts.
                let port = self.port.load(Ordering::Relaxed);
                let mtu = self.pd.device().port_attr(port)?.active_mtu.bytes();
                self.ud_max_msg.store(mtu, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// # Safety
    /// The neutral `QueuePair::post_send` contract.
    pub(crate) unsafe fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { post::post_send(self, wrs) }
    }

    /// # Safety
    /// The neutral `QueuePair::post_recv` contract.
    pub(crate) unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { post::post_recv(self, wrs) }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // The connection goes first: its cm_id holds the QP.
        let qpn = self.qp_num();
        match std::mem::replace(
            self.cm.get_mut().unwrap_or_else(|p| p.into_inner()),
            QpCm::None,
        ) {
            QpCm::None => {}
            QpCm::Active(id) => drop(id),
            QpCm::Passive(l) => l.forget(qpn),
        }
        // SAFETY: created in `create`, destroyed once, while its PD, CQs and SRQ are
        // still alive (fields drop after this). Outstanding WRs are discarded by the
        // provider; their memory is the caller's to keep alive per the post contract.
        let ret = unsafe { ffi::ibv_destroy_qp(self.raw()) };
        if ret != 0 {
            tracing::warn!(ret, "ibv_destroy_qp failed");
        }
    }
}

fn state_from_raw(s: ffi::ibv_qp_state::Type) -> QpState {
    use ffi::ibv_qp_state as S;
    match s {
        S::IBV_QPS_RESET => QpState::Reset,
        S::IBV_QPS_INIT => QpState::Init,
        S::IBV_QPS_RTR => QpState::Rtr,
        S::IBV_QPS_RTS => QpState::Rts,
        S::IBV_QPS_SQD => QpState::Sqd,
        S::IBV_QPS_SQE => QpState::Sqe,
        _ => QpState::Err,
    }
}

/// The `ibv_qp_attr` and mask of a modify to `to`: the mask is `IBV_QP_STATE` plus
/// exactly the attributes that are `Some`. The neutral layer has already checked that
/// every attribute the transition requires is present; one that the transition does
/// not allow is refused by the kernel with `EINVAL`, as on any verbs device.
pub(super) fn qp_attr_to_raw(to: QpState, a: &QpAttr) -> (ffi::ibv_qp_attr, ffi::ibv_qp_attr_mask) {
    use ffi::ibv_qp_attr_mask as M;
    // SAFETY: ibv_qp_attr is plain data (integers and a GID union); all-zero is valid.
    let mut raw: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
    let mut mask = M::IBV_QP_STATE;
    raw.qp_state = to as ffi::ibv_qp_state::Type;
    let mut set = |present: bool, bit: M| {
        if present {
            mask |= bit;
        }
        present
    };
    if set(a.port_num.is_some(), M::IBV_QP_PORT) {
        raw.port_num = a.port_num.unwrap_or_default();
    }
    if set(a.pkey_index.is_some(), M::IBV_QP_PKEY_INDEX) {
        raw.pkey_index = a.pkey_index.unwrap_or_default();
    }
    if set(a.qkey.is_some(), M::IBV_QP_QKEY) {
        raw.qkey = a.qkey.unwrap_or_default();
    }
    if let Some(acc) = a.access_flags {
        set(true, M::IBV_QP_ACCESS_FLAGS);
        raw.qp_access_flags = access_to_raw(acc) as u32;
    }
    if let Some(dest) = &a.dest {
        set(true, M::IBV_QP_AV);
        raw.ah_attr = ah_attr_to_raw(dest);
    }
    if let Some(mtu) = a.path_mtu {
        set(true, M::IBV_QP_PATH_MTU);
        raw.path_mtu = mtu_to_raw(mtu);
    }
    if set(a.dest_qp_num.is_some(), M::IBV_QP_DEST_QPN) {
        raw.dest_qp_num = a.dest_qp_num.unwrap_or_default();
    }
    if set(a.rq_psn.is_some(), M::IBV_QP_RQ_PSN) {
        raw.rq_psn = a.rq_psn.unwrap_or_default() & 0xff_ffff;
    }
    if set(a.max_dest_rd_atomic.is_some(), M::IBV_QP_MAX_DEST_RD_ATOMIC) {
        raw.max_dest_rd_atomic = a.max_dest_rd_atomic.unwrap_or_default();
    }
    if set(a.min_rnr_timer.is_some(), M::IBV_QP_MIN_RNR_TIMER) {
        raw.min_rnr_timer = a.min_rnr_timer.unwrap_or_default();
    }
    if set(a.sq_psn.is_some(), M::IBV_QP_SQ_PSN) {
        raw.sq_psn = a.sq_psn.unwrap_or_default() & 0xff_ffff;
    }
    if set(a.timeout.is_some(), M::IBV_QP_TIMEOUT) {
        raw.timeout = a.timeout.unwrap_or_default();
    }
    if set(a.retry_cnt.is_some(), M::IBV_QP_RETRY_CNT) {
        raw.retry_cnt = a.retry_cnt.unwrap_or_default();
    }
    if set(a.rnr_retry.is_some(), M::IBV_QP_RNR_RETRY) {
        raw.rnr_retry = a.rnr_retry.unwrap_or_default();
    }
    if set(a.max_rd_atomic.is_some(), M::IBV_QP_MAX_QP_RD_ATOMIC) {
        raw.max_rd_atomic = a.max_rd_atomic.unwrap_or_default();
    }
    (raw, mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::AccessFlags;
    use crate::ah::AhAttr;
    use crate::qp_state::Mtu;
    use ffi::ibv_qp_attr_mask as M;

    fn mask(to: QpState, a: &QpAttr) -> u32 {
        qp_attr_to_raw(to, a).1 .0
    }

    /// The masks of the standard transitions are those ibv_rc_pingpong and
    /// ibv_ud_pingpong pass, which every provider accepts.
    #[test]
    fn standard_transitions_use_the_pingpong_masks() {
        let rc_init = M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT;
        assert_eq!(
            mask(QpState::Init, &QpAttr::rc_init(AccessFlags::LOCAL_WRITE)),
            (rc_init | M::IBV_QP_ACCESS_FLAGS).0
        );
        assert_eq!(
            mask(QpState::Init, &QpAttr::ud_init(0x1111)),
            (rc_init | M::IBV_QP_QKEY).0
        );
        let rtr = QpAttr::rc_rtr(AhAttr::default(), 5, 6, Mtu::Mtu1024);
        assert_eq!(
            mask(QpState::Rtr, &rtr),
            (M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER)
                .0
        );
        assert_eq!(
            mask(QpState::Rts, &QpAttr::rc_rts(7)),
            (M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC)
                .0
        );
        assert_eq!(
            mask(QpState::Rts, &QpAttr::ud_rts(7)),
            (M::IBV_QP_STATE | M::IBV_QP_SQ_PSN).0
        );
        assert_eq!(mask(QpState::Rtr, &QpAttr::default()), M::IBV_QP_STATE.0);
        assert_eq!(mask(QpState::Err, &QpAttr::default()), M::IBV_QP_STATE.0);
    }

    #[test]
    fn values_land_in_their_fields() {
        let (raw, _) = qp_attr_to_raw(
            QpState::Rtr,
            &QpAttr::rc_rtr(AhAttr::default(), 0xabc, 0x1_234567, Mtu::Mtu4096),
        );
        assert_eq!(raw.qp_state, ffi::ibv_qp_state::IBV_QPS_RTR);
        assert_eq!(raw.dest_qp_num, 0xabc);
        assert_eq!(raw.rq_psn, 0x23_4567, "PSNs are 24 bits");
        assert_eq!(raw.path_mtu, ffi::ibv_mtu::IBV_MTU_4096);
        assert_eq!((raw.max_dest_rd_atomic, raw.min_rnr_timer), (16, 12));
        for s in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Sqe,
            QpState::Err,
        ] {
            assert_eq!(state_from_raw(s as ffi::ibv_qp_state::Type), s);
        }
    }
}
