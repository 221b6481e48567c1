//! One-WR posting shorthands that fail the test on a synchronous refusal.
//!
//! They are `unsafe` with exactly the contract of the verbs they wrap, so every call
//! site still states, in its `// SAFETY:` line, why the memory stays valid.

use rpc_transport::{QueuePair, RecvWr, SendWr, Sge};

/// Posts one receive WR with scatter list `sges`.
///
/// # Safety
/// As [`QueuePair::post_recv`]: the memory stays registered and untouched by the test
/// until the receive's completion is polled.
pub unsafe fn post_recv(qp: &QueuePair, wr_id: u64, sges: &[Sge]) {
    let wr = RecvWr {
        wr_id,
        sg_list: sges,
    };
    // SAFETY: forwarded contract.
    unsafe { qp.post_recv(&[wr]) }.expect("ibv_post_recv");
}

/// Posts one send WR.
///
/// # Safety
/// As [`QueuePair::post_send`].
pub unsafe fn post_send(qp: &QueuePair, wr: SendWr<'_>) {
    // SAFETY: forwarded contract.
    unsafe { qp.post_send(&[wr]) }.expect("ibv_post_send");
}
