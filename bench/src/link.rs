//! Which link carried rdma-rpc's queue pairs in a run: the soft provider's byte
//! transport between two queue pairs (TCP today), or the verbs device itself.

use crate::provider::Provider;

/// The variable that names (and forces) the soft provider's link.
pub(crate) const SOFT_LINK_ENV: &str = "RDMA_RPC_SOFT_LINK";

/// The `link` of a run's report. This is the one place that decides it: today from
/// `RDMA_RPC_SOFT_LINK` (what the run forced), else "tcp", the soft provider's only
/// link; once the soft device counts the queue pairs of each link, read that here.
pub(crate) fn rdma_link(provider: &Provider) -> String {
    label(provider.is_soft(), std::env::var(SOFT_LINK_ENV).ok())
}

fn label(soft: bool, forced: Option<String>) -> String {
    match (soft, forced) {
        (false, _) => "verbs".to_string(),
        (true, Some(link)) if !link.trim().is_empty() => link.trim().to_string(),
        (true, _) => "tcp".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::label;

    #[test]
    fn the_variable_names_the_soft_link_and_tcp_is_the_default() {
        assert_eq!(label(true, None), "tcp");
        assert_eq!(label(true, Some(String::new())), "tcp");
        assert_eq!(label(true, Some("shm".into())), "shm");
        assert_eq!(label(false, Some("shm".into())), "verbs");
    }
}
