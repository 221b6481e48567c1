//! Two hosts joined by one connected RC queue pair each.

use rpc_transport::{
    AccessFlags, AhAttr, CompletionQueue, Mtu, QpAttr, QpCap, QpEndpoint, QpInitAttr, QpState,
    QpType, QueuePair, RcRetry, SharedReceiveQueue,
};

use super::host::Host;

/// Initial send PSNs of the two sides; different so a side that confuses its own PSN
/// with its peer's fails.
pub const PSN_A: u32 = 0x00_1234;
pub const PSN_B: u32 = 0x00_9abc;

/// How the pair is built.
#[derive(Debug, Clone, Copy)]
pub struct RcOpts {
    /// Remote operations each QP accepts from its peer.
    pub qp_access: AccessFlags,
    /// Queue sizes asked for.
    pub cap: QpCap,
    /// Signal every send WR.
    pub sq_sig_all: bool,
    /// Entries asked for in each side's send CQ.
    pub send_cqe: u32,
    /// Entries asked for in each side's receive CQ.
    pub recv_cqe: u32,
    /// `(min_rnr_timer, rnr_retry)` to use instead of `connect_rc`'s (0.64 ms, infinite).
    pub rnr: Option<(u8, u8)>,
    /// The transport retry budget (ignored with `rnr`, and by iWARP, where TCP retries).
    pub retry: RcRetry,
}

impl Default for RcOpts {
    fn default() -> Self {
        RcOpts {
            qp_access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            cap: QpCap::default(),
            sq_sig_all: false,
            send_cqe: 256,
            recv_cqe: 256,
            rnr: None,
            retry: RcRetry::default(),
        }
    }
}

/// One side: its host, its CQs and its QP.
pub struct RcSide {
    pub qp: QueuePair,
    pub scq: CompletionQueue,
    pub rcq: CompletionQueue,
    pub host: Host,
}

impl RcSide {
    /// Opens a host and creates CQs and a QP in RESET.
    pub fn new(opts: &RcOpts) -> RcSide {
        let host = Host::open();
        let scq = host.cq(opts.send_cqe);
        let rcq = host.cq(opts.recv_cqe);
        let qp = create_rc_qp(&host, &scq, &rcq, None, opts);
        RcSide { qp, scq, rcq, host }
    }
}

/// An RC QP in RESET on `host`, optionally taking receives from `srq`.
pub fn create_rc_qp(
    host: &Host,
    scq: &CompletionQueue,
    rcq: &CompletionQueue,
    srq: Option<&SharedReceiveQueue>,
    opts: &RcOpts,
) -> QueuePair {
    let mut init = QpInitAttr::new(QpType::Rc, scq, rcq);
    init.cap = opts.cap;
    init.sq_sig_all = opts.sq_sig_all;
    init.srq = srq;
    host.pd.create_qp(&init).expect("ibv_create_qp (RC)")
}

/// Two connected RC QPs on two hosts: `a` is usually the requester, `b` the responder.
pub struct RcPair {
    pub a: RcSide,
    pub b: RcSide,
}

impl RcPair {
    /// A connected pair with default options.
    pub fn new() -> RcPair {
        RcPair::with(RcOpts::default())
    }

    /// A connected pair built with `opts` on both sides.
    pub fn with(opts: RcOpts) -> RcPair {
        let a = RcSide::new(&opts);
        let b = RcSide::new(&opts);
        connect_pair(&a.qp, PSN_A, &b.qp, PSN_B, &opts);
        RcPair { a, b }
    }
}

/// Connects `qa` (send PSN `psn_a`, the passive side) and `qb` (send PSN `psn_b`,
/// the initiator) to each other.
pub fn connect_pair(qa: &QueuePair, psn_a: u32, qb: &QueuePair, psn_b: u32, opts: &RcOpts) {
    let ea = qa.endpoint(psn_a).expect("endpoint of a");
    let eb = qb.endpoint(psn_b).expect("endpoint of b");
    accept(qa, psn_a, &eb, opts);
    connect(qb, psn_b, &ea, opts);
}

/// The passive side's [`connect`] (`accept_rc`, which only iWARP tells apart: there
/// the peer's `connect_rc` connects both through rdma_cm).
pub fn accept(qp: &QueuePair, local_psn: u32, remote: &QpEndpoint, opts: &RcOpts) {
    if opts.rnr.is_none() {
        qp.accept_rc_with(remote, local_psn, opts.qp_access, opts.retry)
            .expect("accept_rc");
        return;
    }
    connect(qp, local_psn, remote, opts);
}

/// RESET → RTS towards `remote`, through `connect_rc` unless `opts` changes the RNR
/// settings, which `connect_rc` does not take (so the modify sequence is spelled out,
/// which iWARP devices refuse: they have no RNR, and connect through rdma_cm only).
pub fn connect(qp: &QueuePair, local_psn: u32, remote: &QpEndpoint, opts: &RcOpts) {
    let Some((min_rnr_timer, rnr_retry)) = opts.rnr else {
        qp.connect_rc_with(remote, local_psn, opts.qp_access, opts.retry)
            .expect("connect_rc");
        return;
    };
    let dev = qp.pd().device();
    let mtu = dev
        .port_attr(1)
        .expect("ibv_query_port")
        .active_mtu
        .min(Mtu::Mtu4096);
    let ah = AhAttr::from_endpoint(remote, dev.preferred_gid_index());
    qp.modify(QpState::Init, &QpAttr::rc_init(opts.qp_access))
        .expect("RESET -> INIT");
    let rtr = QpAttr {
        min_rnr_timer: Some(min_rnr_timer),
        ..QpAttr::rc_rtr(ah, remote.qpn, remote.psn, mtu)
    };
    qp.modify(QpState::Rtr, &rtr).expect("INIT -> RTR");
    let rts = QpAttr {
        rnr_retry: Some(rnr_retry),
        ..QpAttr::rc_rts(local_psn)
    };
    qp.modify(QpState::Rts, &rts).expect("RTR -> RTS");
}

impl RcSide {
    /// Spawns the child `role` and connects to it: takes its endpoint, accepts it,
    /// tells it ours and `region`'s key, and posts receive `wr_id` 1 into `buf`.
    pub fn accept_child(
        &self,
        role: &str,
        region: &rpc_transport::MemoryRegion,
        buf: &rpc_transport::MemoryRegion,
        opts: &RcOpts,
    ) -> super::child::ChildProc {
        let mut peer = super::child::ChildProc::spawn(role);
        let ep: rpc_transport::QpEndpoint = peer.recv("ep").parse().expect("endpoint record");
        accept(&self.qp, PSN_A, &ep, opts);
        peer.send(
            "ep",
            &self.qp.endpoint(PSN_A).expect("endpoint").to_string(),
        );
        peer.send("mr", &super::child::mr_to_text(&region.remote()));
        // SAFETY: `buf` is only read after the receive's completion.
        unsafe { super::post_recv(&self.qp, 1, &[buf.sge(0, 64)]) };
        peer
    }

    /// The Send with `wr_id` 2, posted just before the peer process was killed, ends
    /// RETRY_EXC_ERR. On a NIC it may also succeed (handed over before the death), or
    /// be flushed: siw moves the QP to ERR when the peer's TCP reset arrives, which
    /// can come before the Send is processed (seen on siw0, 2026-11-25).
    pub fn expect_send_ended_by_dead_peer(&self, what: &str) {
        use rpc_transport::WcStatus;
        let soft = self.host.dev.provider() == rpc_transport::ProviderKind::Soft;
        let send = super::wait_wc(&self.scq, what);
        let ended = match send.status {
            WcStatus::RetryExcErr => true,
            WcStatus::Success | WcStatus::WrFlushErr => !soft,
            _ => false,
        };
        assert!(
            ended && send.wr_id == 2,
            "{what} must fail RETRY_EXC_ERR (or, on a NIC, succeed or be flushed): \
             {send:?}"
        );
    }

    /// The peer process died with receive `wr_id` 1 posted here: that receive is
    /// flushed, the QP is in ERR where the device reports states, and the soft
    /// provider raises QP_FATAL for it (`what` names the death in failures).
    pub fn expect_ended_by_dead_peer(&self, what: &str) {
        let recv = super::wait_wcs(&self.rcq, 1, "the flushed receive")[0];
        assert_eq!(
            (recv.wr_id, recv.status),
            (1, rpc_transport::WcStatus::WrFlushErr),
            "{what}: {recv:?}"
        );
        if super::quirks::reports_qp_state(&self.host.dev) {
            super::wait_state(&self.qp, QpState::Err, what);
        }
        if self.host.dev.provider() == rpc_transport::ProviderKind::Soft {
            let qpn = self.qp.qp_num();
            super::wait_event(&self.host.dev, "QP_FATAL", |e| {
                *e == rpc_transport::AsyncEvent::QpFatal(qpn)
            });
        }
    }
}
