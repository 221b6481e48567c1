//! Two hosts with one active UD queue pair each.

use rpc_transport::{
    AddressHandle, AhAttr, CompletionQueue, QpEndpoint, QpInitAttr, QpType, QueuePair,
};

use super::host::Host;

/// Q_Key both sides use.
pub const QKEY: u32 = 0x1111_1111;

/// One side: its host, CQs, an active UD QP and the endpoint a peer needs.
pub struct UdSide {
    pub qp: QueuePair,
    pub scq: CompletionQueue,
    pub rcq: CompletionQueue,
    pub ep: QpEndpoint,
    pub host: Host,
}

impl UdSide {
    /// Opens a host and brings a UD QP to RTS.
    pub fn new(psn: u32) -> UdSide {
        let host = Host::open();
        let scq = host.cq(256);
        let rcq = host.cq(256);
        let qp = host
            .pd
            .create_qp(&QpInitAttr::new(QpType::Ud, &scq, &rcq))
            .expect("ibv_create_qp (UD)");
        qp.activate_ud(QKEY, psn).expect("activate_ud");
        let ep = qp.endpoint(psn).expect("endpoint");
        UdSide {
            qp,
            scq,
            rcq,
            ep,
            host,
        }
    }

    /// An address handle reaching `remote` from this side.
    pub fn ah_to(&self, remote: &QpEndpoint) -> AddressHandle {
        let attr = AhAttr::from_endpoint(remote, self.host.dev.preferred_gid_index());
        self.host.pd.create_ah(&attr).expect("ibv_create_ah")
    }
}

/// Two UD sides; `a` usually sends to `b`.
pub struct UdPair {
    pub a: UdSide,
    pub b: UdSide,
}

impl UdPair {
    pub fn new() -> UdPair {
        UdPair {
            a: UdSide::new(0x11),
            b: UdSide::new(0x22),
        }
    }
}
