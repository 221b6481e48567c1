//! Generates the example services from the workspace's protos.
fn main() -> std::io::Result<()> {
    rpc_codegen::configure()
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
