//! Generates the `grpc.health.v1` messages and the `Health` service's client and server
//! with rpc-codegen, after protox has parsed the proto (no `protoc` needed), and writes
//! the encoded descriptor set beside them.
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let proto = "proto/grpc/health/v1/health.proto";
    println!("cargo:rerun-if-changed={proto}");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut compiler = protox::Compiler::new(["proto"]).map_err(std::io::Error::other)?;
    // Source info: proto comments become rustdoc, and reflection clients see them.
    compiler.include_imports(true).include_source_info(true);
    compiler
        .open_file(proto)
        // Debug, not Display: it carries the file, line and column.
        .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    std::fs::write(
        out.join("grpc_health_v1_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;
    rpc_codegen::configure().compile_fds(compiler.file_descriptor_set())
}
