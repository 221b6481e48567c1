//! Generates the example services from the workspace's protos.
fn main() -> std::io::Result<()> {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    rpc_codegen::configure()
        // For the servers' reflection service.
        .file_descriptor_set_path(out.join("examples_descriptor.bin"))
        // File chunks share the buffer they were decoded from or are sent from.
        .bytes(".filetransfer.Chunk.data")
        .compile_protos(
            &[
                "../proto/helloworld.proto",
                "../proto/echo.proto",
                "../proto/kv.proto",
                "../proto/route_guide.proto",
                "../proto/file_transfer.proto",
                "../proto/slow_consumer.proto",
            ],
            &["../proto"],
        )
}
