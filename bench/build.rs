//! Generates the benchmark's services twice from `proto/echo.proto` (unary),
//! `proto/echo_stream.proto` (streaming) and `proto/upload.proto` (one way):
//! rdma-rpc's stubs (by `rpc-codegen`) and tonic's (by `tonic-prost-build`), each
//! into its own directory because both name their output after the package. protox parses the protos: no `protoc`.
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let protos = [
        "../proto/echo.proto",
        "../proto/echo_stream.proto",
        "../proto/upload.proto",
    ];
    let include = "../proto";
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    for sub in ["rdma", "tonic"] {
        std::fs::create_dir_all(out.join(sub))?;
    }
    // `bytes` fields: one payload buffer is shared by every call instead of copied.
    rpc_codegen::configure()
        .bytes(".")
        .out_dir(out.join("rdma"))
        .compile_protos(&protos, &[include])?;
    let fds = protox::compile(protos, [include]).map_err(std::io::Error::other)?;
    tonic_prost_build::configure()
        .bytes(".")
        .out_dir(out.join("tonic"))
        .compile_fds(fds)
}
