//! gRPC health checking for rdma-rpc: the standard `grpc.health.v1` package, shaped
//! like tonic-health 0.14.
#![forbid(unsafe_code)]

pub mod pb;
mod serving_status;

pub use serving_status::ServingStatus;
