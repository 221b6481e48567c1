//! Generates the echo service twice from `proto/echo.proto`: rdma-rpc's stubs (by
//! `rpc-codegen`) and tonic's (by `tonic-prost-build`), each into its own directory
//! because both name their output `echo.rs`. protox parses the proto: no `protoc`.
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let (proto, include) = ("../proto/echo.proto", "../proto");
    println!("cargo:rerun-if-changed={proto}");
    for sub in ["rdma", "tonic"] {
        std::fs::create_dir_all(out.join(sub))?;
    }
    // `bytes` fields: one payload buffer is shared by every call instead of copied.
    rpc_codegen::configure()
        .bytes(".")
        .out_dir(out.join("rdma"))
        .compile_protos(&[proto], &[include])?;
    let fds = protox::compile([proto], [include]).map_err(std::io::Error::other)?;
    tonic_prost_build::configure()
        .bytes(".")
        .out_dir(out.join("tonic"))
        .compile_fds(fds)
}
