//! Statuses where the kernel's SoftRoCE driver (rxe) departs from the IBA.
//!
//! Every device is held to the IBA status (which mlx5 and the soft provider report).
//! On rxe the suite also accepts the status rxe is known to report instead, each named
//! here with the driver path that produces it, so a departure is a documented fact of
//! one device and not a loosened rule. Checked against Linux 6.1's drivers/infiniband/sw/rxe.

use rpc_transport::{Device, ProviderKind, WcStatus, WorkCompletion};

/// A known departure of one verbs driver from the IBA completion status.
pub struct Quirk {
    /// Devices it applies to, by name prefix.
    device_prefix: &'static str,
    /// The status that driver reports.
    status: WcStatus,
    /// Where it comes from.
    why: &'static str,
}

/// A send naming an lkey that no longer exists.
pub const RXE_UNKNOWN_LKEY: Quirk = Quirk {
    device_prefix: "rxe",
    status: WcStatus::LocQpOpErr,
    why: "rxe_req's copy_data() fails the lkey lookup with -EINVAL, mapped to \
          LOC_QP_OP_ERR (only -EFAULT, a bounds fault, becomes LOC_PROT_ERR)",
};

/// A Send larger than the receive it lands in, at the responder.
pub const RXE_RECV_TOO_SMALL: Quirk = Quirk {
    device_prefix: "rxe",
    status: WcStatus::LocQpOpErr,
    why: "rxe_resp's send_data_in() fails copy_data() with -EINVAL, handled as \
          RESPST_ERR_MALFORMED_WQE: LOC_QP_OP_ERR instead of LOC_LEN_ERR",
};

/// The same, at the requester.
pub const RXE_RECV_TOO_SMALL_NAK: Quirk = Quirk {
    device_prefix: "rxe",
    status: WcStatus::RemOpErr,
    why: "for RESPST_ERR_MALFORMED_WQE rxe_resp NAKs with Remote Operational Error, \
          not Invalid Request",
};

/// A Read through a type-2 memory window, inside the window's region but outside
/// the window.
pub const RXE_MW_RANGE: Quirk = Quirk {
    device_prefix: "rxe",
    status: WcStatus::Success,
    why: "rxe_resp's check_rkey() looks the window up, then checks the range with \
          mr_check_range() on the window's MR, never against the window's own address \
          and length: a window reaches its whole region (still only from the QP it is \
          bound on, and only until it is invalidated)",
};

/// Asserts that `wc` completed with the IBA status `iba`, or on a device `quirk`
/// applies to, with the status that device is known to report.
pub fn assert_status(dev: &Device, wc: &WorkCompletion, iba: WcStatus, quirk: Option<&Quirk>) {
    if wc.status == iba {
        return;
    }
    if let Some(q) = quirk {
        let applies =
            dev.provider() == ProviderKind::Verbs && dev.name().starts_with(q.device_prefix);
        if applies && wc.status == q.status {
            eprintln!(
                "{}: known departure from the IBA's {iba:?}: {}",
                dev.name(),
                q.why
            );
            return;
        }
    }
    panic!("expected status {iba:?}, got {:?}: {wc:?}", wc.status);
}

/// Whether `ibv_query_qp` on `dev` reports a QP's state. siw's does not (it has no
/// `qp_state` to give), so on siw a QP that entered ERR by itself cannot be seen to;
/// its flushed work requests are what shows it.
pub fn reports_qp_state(dev: &Device) -> bool {
    !(dev.provider() == ProviderKind::Verbs && dev.name().starts_with("siw"))
}
