//! Generates the greeter and key-value services used by the cross-process tests.
fn main() -> std::io::Result<()> {
    rpc_codegen::configure().compile_protos(
        &["../proto/helloworld.proto", "../proto/kv.proto"],
        &["../proto"],
    )
}
