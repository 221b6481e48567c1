//! rdma-rpc's RPC layer: tonic-shaped `Request`/`Response`/`Status`, a client
//! `Channel` and a `Server`, over RDMA queue pairs from `rpc-transport`.
//!
//! Porting a tonic program is a rename of the crate and a change of address:
//! `rpc_core::{Request, Response, Status, Code, async_trait, include_proto,
//! transport::{Server, Channel, Endpoint}}`.
#![forbid(unsafe_code)]

pub mod client;
mod code;
#[doc(hidden)]
pub mod codegen;
// The engine was public; its items keep the `pub` of a sans-IO API (quinn-proto's
// shape), and some of it is driven only by its own tests and the fuzz targets
// (stats, the timer entry points) until the drivers use it. Narrowing it to
// `pub(crate)` and dropping what stays unused belongs to the engine's own changes.
#[allow(unreachable_pub, dead_code, unused_imports)]
mod engine;
mod id_map;
pub mod metadata;
mod payload;
mod request;
mod response;
pub mod server;
mod status;
pub mod transport;

pub use async_trait::async_trait;
pub use code::Code;
pub use metadata::MetadataMap;
pub use payload::Payload;
pub use request::{IntoRequest, Request};
pub use response::Response;
pub use status::Status;

/// The sans-IO engine pieces the fuzz targets in `fuzz/` drive (frame heads and the
/// UD engine). Not part of the API: no stability, no documentation beyond the
/// engine's own.
#[doc(hidden)]
pub mod fuzzing {
    /// The RC frame layout (`engine::wire`).
    pub mod wire {
        pub use crate::engine::wire::{
            imm, parse_imm, read_frag, write_frag_head, RequestHead, ResponseHead, FRAG_HEAD_LEN,
            REQUEST_HEAD_LEN, RESPONSE_HEAD_LEN,
        };
    }

    /// The UD engine's two ends (`engine::ud`).
    pub mod ud {
        pub use crate::engine::ud::{UdClient, UdClientConfig, UdServer, UdServerConfig};
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
