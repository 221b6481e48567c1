//! rdma-rpc's RPC layer (being built).
#![forbid(unsafe_code)]
