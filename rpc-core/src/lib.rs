//! rdma-rpc's RPC layer: tonic-shaped `Request`/`Response`/`Status`, a client
//! `Channel` and a `Server`, over RDMA queue pairs from `rpc-transport`.
//!
//! Porting a tonic program is a rename of the crate and a change of address:
//! `rpc_core::{Request, Response, Status, Code, async_trait, include_proto,
//! transport::{Server, Channel, Endpoint}}`.
#![forbid(unsafe_code)]

pub mod client;
mod code;
pub mod codec;
#[doc(hidden)]
pub mod codegen;
mod engine;
mod extensions;
mod grpc_timeout;
mod handshake;
mod id_map;
pub mod metadata;
mod payload;
mod request;
mod response;
pub mod server;
pub mod service;
mod slot_buf;
mod status;
pub mod stream;
pub mod transport;

pub use async_trait::async_trait;
pub use code::Code;
pub use codec::Streaming;
pub use extensions::{Extensions, GrpcMethod};
pub use metadata::MetadataMap;
pub use payload::Payload;
pub use request::{IntoRequest, IntoStreamingRequest, Request, WaitForReady};
pub use response::Response;
pub use status::Status;

/// A result whose error is a [`Status`] by default, as tonic's `tonic::Result`.
pub type Result<T, E = Status> = std::result::Result<T, E>;

/// The sans-IO protocol engine and the handshake negotiation, for the fuzz targets in
/// `fuzz/` and the wire-level tests of this workspace. Not part of the API: no
/// stability, no documentation beyond the engine's own.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::engine::*;

    /// The handshake negotiation (`hello` in, grant or refusal out).
    pub mod handshake {
        pub use crate::handshake::*;
    }
}

/// Includes the code generated for a proto package by `rpc_codegen::compile_protos`,
/// as `tonic::include_proto!`: `pub mod hello { rpc_core::include_proto!("helloworld"); }`.
#[macro_export]
macro_rules! include_proto {
    ($package:tt) => {
        include!(concat!(env!("OUT_DIR"), concat!("/", $package, ".rs")));
    };
}

/// Includes the encoded `FileDescriptorSet` that `file_descriptor_set_path` wrote to
/// `OUT_DIR/<name>.bin`, as a `&'static [u8]` (tonic's
/// `include_file_descriptor_set!`, e.g. for `rpc-reflection`).
#[macro_export]
macro_rules! include_file_descriptor_set {
    ($name:tt) => {
        include_bytes!(concat!(env!("OUT_DIR"), concat!("/", $name, ".bin")))
    };
}
