//! Compiles the repository's protos and this crate's own, which cover every case the
//! generator must handle (see `protos/`).

fn main() -> std::io::Result<()> {
    rpc_codegen::compile_protos(
        &[
            "../proto/helloworld.proto",
            "../proto/echo.proto",
            "../proto/kv.proto",
            "protos/a/b/c/store.proto",
            "protos/naming.proto",
            "protos/multi.proto",
            "protos/nopackage.proto",
        ],
        &["../proto", "protos"],
    )
}
