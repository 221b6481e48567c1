//! Which link a soft device's RC QPs use: shared memory between devices of one
//! process or host (the default), TCP when `RDMA_RPC_SOFT_LINK=tcp` says so.

use rpc_transport::{CompletionQueue, Device, SOFT_LINK_ENV};

use super::wait::Deadline;

/// Whether this run expects soft RC connections on shared memory.
pub fn expect_shm() -> bool {
    std::env::var(SOFT_LINK_ENV).map_or(true, |v| v != "tcp")
}

/// Whether this run's soft devices copy directly between processes on shared memory
/// (placed Read responses, lent Sends and Writes): not with RC on TCP, nor with
/// `rings`.
pub fn expect_direct() -> bool {
    expect_shm() && std::env::var(SOFT_LINK_ENV).map_or(true, |v| v != "rings")
}

/// Drives `cqs` (popping nothing) until `dev`'s connection moved to shared memory, or,
/// in a TCP run, checks that none did. Verbs devices have no such choice.
pub fn wait_link(dev: &Device, cqs: &[&CompletionQueue]) {
    let Some(_) = dev.soft_stats() else { return };
    let shm = || dev.soft_stats().expect("soft").rc_shm_links;
    if !expect_shm() {
        assert_eq!(
            shm(),
            0,
            "${SOFT_LINK_ENV}=tcp, yet a link moved to shared memory"
        );
        return;
    }
    let deadline = Deadline::start();
    while shm() == 0 {
        for cq in cqs {
            let _ = cq.poll(&mut []);
        }
        deadline.tick(|| "the RC connection to move to shared memory".into());
    }
}
