//! Address handles: where a UD datagram goes.

use std::sync::Arc;

use crate::addr::{Gid, QpEndpoint};
use crate::soft;

/// Global routing part of an address vector (`struct ibv_global_route`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// Index of the local GID to send from.
    pub sgid_index: u8,
    /// IPv6 hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
}

/// An address vector (`struct ibv_ah_attr`), used for UD address handles and for an
/// RC QP's destination at RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    /// Destination LID (InfiniBand).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Local port (1-based).
    pub port_num: u8,
    /// Global route; required on RoCE and soft.
    pub grh: Option<GlobalRoute>,
}

impl AhAttr {
    /// The address vector reaching `ep` from local GID `sgid_index` on port 1: routed
    /// by LID without a GRH when `ep` has a LID (InfiniBand, inside one subnet), else
    /// by its GID with a GRH (RoCE, soft).
    pub fn from_endpoint(ep: &QpEndpoint, sgid_index: u8) -> AhAttr {
        AhAttr {
            dlid: ep.lid,
            sl: 0,
            port_num: 1,
            grh: (ep.lid == 0 && ep.gid != Gid::default()).then_some(GlobalRoute {
                dgid: ep.gid,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }),
        }
    }
}

pub(crate) enum AhImp {
    Soft(Arc<soft::Ah>),
    #[cfg(feature = "rdma")]
    Verbs(Arc<crate::verbs::Ah>),
}

/// A UD address handle (`ibv_ah`); keeps its protection domain alive.
pub struct AddressHandle {
    pub(crate) imp: AhImp,
    attr: AhAttr,
}

impl AddressHandle {
    pub(crate) fn new(imp: AhImp, attr: AhAttr) -> Self {
        AddressHandle { imp, attr }
    }

    /// The address vector it was created with.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }
}

impl std::fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressHandle")
            .field("attr", &self.attr)
            .finish()
    }
}
