//! Which link carried rdma-rpc's queue pairs in a run: on the soft provider, shared
//! memory or TCP (the soft device decides per connection and counts both), or the
//! verbs device itself.

use std::sync::Mutex;

use rpc_transport::{Device, SoftConfig, SoftLink};

use crate::provider::Provider;

/// The soft devices rdma-rpc's client channels used in this run, kept so that their
/// counters can be read at the end (an idle soft device costs no wake-ups).
static SOFT_DEVICES: Mutex<Vec<Device>> = Mutex::new(Vec::new());

/// The device for one client channel: on the soft provider a new device this module
/// counts links on (as `Endpoint::device` would open), else `None` (the name is used).
/// With `tcp_link` (`rdma-rpc-tcp`), a soft device whose link is forced to TCP, not
/// counted: the run's `link` says what the default took.
pub(crate) fn client_device(provider: &Provider, tcp_link: bool) -> Result<Option<Device>, String> {
    if tcp_link {
        return tcp_link_device(provider).map(Some);
    }
    if !provider.is_soft() {
        return Ok(None);
    }
    let dev = Device::open(provider.device()).map_err(|e| e.to_string())?;
    SOFT_DEVICES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(dev.clone());
    Ok(Some(dev))
}

/// A soft device whose same-host link is TCP (`rdma-rpc-tcp`); an error on another
/// provider.
pub(crate) fn tcp_link_device(provider: &Provider) -> Result<Device, String> {
    if !provider.is_soft() {
        return Err(
            "rdma-rpc-tcp runs on the soft provider only (it forces its link to TCP)".into(),
        );
    }
    let config = SoftConfig {
        link: SoftLink::Tcp,
        ..SoftConfig::default()
    };
    Device::open_soft(config).map_err(|e| e.to_string())
}

/// The `link` of a run's report, from the client devices' counters: how many of the
/// RC connections they made moved to shared memory.
pub(crate) fn rdma_link(provider: &Provider) -> String {
    if !provider.is_soft() {
        return "verbs".to_string();
    }
    let (mut conns, mut shm) = (0, 0);
    for d in SOFT_DEVICES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        if let Some(s) = d.soft_stats() {
            conns += s.rc_connections;
            shm += s.rc_shm_links;
        }
    }
    label(conns, shm)
}

fn label(conns: u64, shm: u64) -> String {
    match (conns, shm) {
        (0, _) => "none (no RC connection)".to_string(),
        (c, s) if s >= c => "shm".to_string(),
        (_, 0) => "tcp".to_string(),
        (c, s) => format!("shm for {s} of {c} RC connections, tcp for the rest"),
    }
}

#[cfg(test)]
mod tests {
    use super::label;

    #[test]
    fn the_label_says_which_link_the_connections_took() {
        assert_eq!(label(0, 0), "none (no RC connection)");
        assert_eq!(label(3, 3), "shm");
        assert_eq!(label(3, 0), "tcp");
        assert_eq!(
            label(3, 1),
            "shm for 1 of 3 RC connections, tcp for the rest"
        );
    }
}
