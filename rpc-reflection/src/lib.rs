//! gRPC server reflection for rdma-rpc: the `grpc.reflection.v1.ServerReflection`
//! service (and `v1alpha`, for older clients), shaped like tonic-reflection 0.14. A
//! program written against `tonic_reflection::` paths builds against this crate when
//! its Cargo.toml names it `tonic-reflection = { package = "rpc-reflection", .. }`.
//!
//! Reflection lets a client that has no `.proto` files, such as the `rdma-rpc`
//! command line (crate `rpc-cli`), list a server's services and read the
//! descriptors of their methods and messages.
//!
//! # Serving
//!
//! The build script writes the descriptor set of the protos it compiles:
//!
//! ```ignore
//! // build.rs
//! let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
//! rpc_codegen::configure()
//!     .file_descriptor_set_path(out.join("helloworld_descriptor.bin"))
//!     .compile_protos(&["proto/helloworld.proto"], &["proto"])?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! and the server registers it and serves the reflection service beside its own:
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! # const FILE_DESCRIPTOR_SET: &[u8] = &[];
//! // const FILE_DESCRIPTOR_SET: &[u8] =
//! //     include_bytes!(concat!(env!("OUT_DIR"), "/helloworld_descriptor.bin"));
//! let reflection = rpc_reflection::server::Builder::configure()
//!     .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
//!     .build_v1()?;
//! rpc_core::transport::Server::builder()
//!     .add_service(reflection)
//!     // .add_service(GreeterServer::new(MyGreeter))
//!     .serve("127.0.0.1:50051".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! `ServerReflectionInfo` is a bidirectional stream (RC only, as every rdma-rpc
//! stream; a UD channel opens it over RC): each request gets one answer, in order.
//!
//! # Differences from tonic-reflection
//!
//! * A symbol or file the service does not know is answered with an `ErrorResponse`
//!   (`NOT_FOUND`) and the call goes on, as the gRPC reflection protocol and
//!   grpc-go have it; tonic-reflection ends the call with the error.
//! * A file is sent with the registered files it imports, transitively (as
//!   grpc-go), so a client needs one round trip per symbol.
//! * Services are listed sorted by name.
#![forbid(unsafe_code)]

pub mod pb;
pub mod server;
