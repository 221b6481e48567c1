//! Compiles the repository's protos and this crate's own, which cover every case the
//! generator must handle (see `protos/`); then two of them again with the builder's
//! options that change the server trait's shape, into `$OUT_DIR/variants`. The
//! first also writes the include file of every package, `all_protos.rs`.

fn main() -> std::io::Result<()> {
    rpc_codegen::configure()
        .include_file("all_protos.rs")
        .compile_protos(
            &[
                "../proto/helloworld.proto",
                "../proto/echo.proto",
                "../proto/kv.proto",
                "../proto/route_guide.proto",
                "protos/a/b/c/store.proto",
                "protos/naming.proto",
                "protos/multi.proto",
                "protos/nopackage.proto",
            ],
            &["../proto", "protos"],
        )?;
    let variants = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"))
        .join("variants");
    std::fs::create_dir_all(&variants)?;
    rpc_codegen::configure()
        .use_arc_self(true)
        .generate_default_stubs(true)
        .out_dir(variants)
        .compile_protos(
            &[
                "../proto/helloworld.proto",
                "../proto/echo.proto",
                "../proto/route_guide.proto",
            ],
            &["../proto"],
        )
}
