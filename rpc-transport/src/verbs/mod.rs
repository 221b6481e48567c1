//! The verbs provider over libibverbs (feature `rdma`). Being built.
