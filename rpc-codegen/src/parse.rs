//! `.proto` files → a `FileDescriptorSet`, with protox (no `protoc` needed).

use std::io;
use std::path::Path;

use prost_types::FileDescriptorSet;

/// Parses `protos` and everything they import (searched in `includes`, then among
/// the well-known types protox carries), keeping comments for rustdoc. When
/// `rerun_if_changed`, tells cargo to rerun the build script when any of those files
/// on disk changes.
pub(crate) fn parse(
    protos: &[impl AsRef<Path>],
    includes: &[impl AsRef<Path>],
    rerun_if_changed: bool,
) -> io::Result<FileDescriptorSet> {
    let mut compiler = protox::Compiler::new(includes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{e:?}")))?;
    compiler.include_imports(true).include_source_info(true);
    compiler
        .open_files(protos)
        // Debug, not Display: it carries the file, line and column.
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{e:?}")))?;
    if rerun_if_changed {
        // Files only: a directory would be rescanned on every build (an include of
        // "." contains `target/`), so new files are noticed through their importers.
        for file in compiler.files() {
            if let Some(path) = file.path() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    Ok(compiler.file_descriptor_set())
}
