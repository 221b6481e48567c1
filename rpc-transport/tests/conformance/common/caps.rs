//! Features a device may lack (UD, immediate data, atomics): a test of one first asks
//! the device; when it says it lacks the feature, the test asserts that the device
//! refuses it as such a device does, instead of skipping.
//!
//! Refusals are those of Linux's `siw`, the iWARP driver: `ibv_create_qp` of a UD QP
//! fails with `EOPNOTSUPP`, and posting an opcode the device lacks is refused at that
//! WR (`PostError::Unsupported`), with the QP left as it was.

use std::io::Write as _;

use rpc_transport::{
    Error, PostError, QpInitAttr, QpState, QpType, SendOp, SendWr, WcOpcode, WcStatus,
};

use super::host::Host;
use super::rc::RcPair;
use super::{assert_refused, post_recv, post_send, wait_wc};

/// Whether the device under test has UD. When it does not, this has asserted that
/// creating a UD QP fails with `EOPNOTSUPP`, and the caller's test is done.
pub fn has_ud_or_refuses_it() -> bool {
    let host = Host::open();
    if host.dev.caps().ud {
        return true;
    }
    let cq = host.cq(4);
    match host.pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq)) {
        Err(Error::Verb { verb, source })
            if verb == "ibv_create_qp" && source.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
        Err(other) => panic!("a device without UD refused a UD QP with {other}, not EOPNOTSUPP"),
        Ok(_) => panic!(
            "device {} reports no UD but created a UD QP",
            host.dev.name()
        ),
    }
    note(&host, "UD", "ibv_create_qp refused with EOPNOTSUPP");
    false
}

/// Whether the device under test has immediate data. When it does not, this has
/// asserted on `p` that `op` (a Send or Write with Immediate) is refused at post time
/// and that the QP still carries a plain Send, and the caller's test is done.
pub fn has_imm_or_refuses(p: &RcPair, op: SendOp) -> bool {
    if p.a.host.dev.caps().imm_data {
        return true;
    }
    assert_op_refused(p, op);
    note(
        &p.a.host,
        "immediate data",
        "the post was refused, the QP unharmed",
    );
    false
}

/// Whether the device under test has atomics; as [`has_imm_or_refuses`] otherwise.
pub fn has_atomics_or_refuses(p: &RcPair, op: SendOp) -> bool {
    let caps = p.a.host.dev.caps();
    assert_eq!(
        caps.atomics,
        p.a.host.dev.attr().atomics,
        "caps() and attr() disagree on atomics"
    );
    if caps.atomics {
        return true;
    }
    assert_op_refused(p, op);
    note(
        &p.a.host,
        "atomics",
        "the post was refused, the QP unharmed",
    );
    false
}

/// Posts `op` (with one 8-byte SGE) and expects a synchronous `Unsupported`
/// refusal; then proves the QP still works with a plain Send.
fn assert_op_refused(p: &RcPair, op: SendOp) {
    let local = p.a.host.mr_all(8);
    let sge = [local.sge(0, 8)];
    // SAFETY: refused before the device sees it (asserted), so nothing reads `local`.
    let r = unsafe { p.a.qp.post_send(&[SendWr::new(1, op, &sge)]) };
    assert_refused(r, 0, PostError::Unsupported);
    assert_eq!(
        p.a.qp.state(),
        QpState::Rts,
        "a refused post changed the QP"
    );

    let dst = p.b.host.mr_all(8);
    // SAFETY: `dst` and `local` outlive the completions waited for below.
    unsafe { post_recv(&p.b.qp, 2, &[dst.sge(0, 8)]) };
    local.write(0, b"still ok");
    // SAFETY: as above.
    unsafe { post_send(&p.a.qp, SendWr::new(3, SendOp::Send, &sge)) };
    let wc = wait_wc(&p.b.rcq, "a plain Send after the refusal");
    assert_eq!(
        (wc.status, wc.opcode, wc.imm_data),
        (WcStatus::Success, WcOpcode::Recv, None)
    );
    assert_eq!(dst.to_vec(0, 8), b"still ok");
}

/// Says on stderr (past libtest's capture) which refusal stood in for the test.
fn note(host: &Host, feature: &str, how: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "conformance: device {} has no {feature}: {how}",
        host.dev.name()
    );
}
