//! Generates the example services from the workspace's protos.
fn main() -> std::io::Result<()> {
    rpc_codegen::configure().compile_protos(
        &[
            "../proto/helloworld.proto",
            "../proto/echo.proto",
            "../proto/kv.proto",
        ],
        &["../proto"],
    )
}
