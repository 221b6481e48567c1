//! Code generation for rdma-rpc (being built).
#![forbid(unsafe_code)]
