//! Generates `grpc.reflection.v1` and `grpc.reflection.v1alpha` (messages, client and
//! server) with rpc-codegen after protox has parsed the protos (no `protoc` needed),
//! and writes each version's encoded descriptor set beside them, so the reflection
//! service can describe itself.
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for version in ["v1", "v1alpha"] {
        let proto = format!("proto/grpc/reflection/{version}/reflection.proto");
        println!("cargo:rerun-if-changed={proto}");
        let mut compiler = protox::Compiler::new(["proto"]).map_err(std::io::Error::other)?;
        compiler.include_imports(true).include_source_info(true);
        compiler
            .open_file(&proto)
            // Debug, not Display: it carries the file, line and column.
            .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        std::fs::write(
            out.join(format!("grpc_reflection_{version}_descriptor.bin")),
            compiler.encode_file_descriptor_set(),
        )?;
        rpc_codegen::configure().compile_fds(compiler.file_descriptor_set())?;
    }
    Ok(())
}
