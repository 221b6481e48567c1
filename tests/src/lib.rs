//! Shared helpers for rdma-rpc's integration tests.
#![forbid(unsafe_code)]
