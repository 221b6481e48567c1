fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_build::configure()
        .file_descriptor_set_path(out.join("parity_descriptor.bin"))
        .compile_protos(&["proto/parity.proto"], &["proto"])?;
    Ok(())
}
