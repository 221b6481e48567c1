//! `--proto` files parsed with protox (no protoc) and `--protoset` descriptor sets.

use std::path::PathBuf;

use prost::Message;
use prost_reflect::DescriptorPool;
use prost_types::FileDescriptorSet;

use super::Schema;
use crate::args::SchemaArgs;
use crate::fail::{local, Fail};

pub(super) fn load(args: &SchemaArgs) -> Result<Schema, Fail> {
    let mut pool = DescriptorPool::new();
    for path in &args.protosets {
        let bytes = std::fs::read(path)
            .map_err(|e| local(format!("reading --protoset {}: {e}", path.display())))?;
        let set = FileDescriptorSet::decode(bytes.as_slice()).map_err(|e| {
            local(format!(
                "--protoset {} is not a FileDescriptorSet: {e}",
                path.display()
            ))
        })?;
        pool.add_file_descriptor_protos(set.file)
            .map_err(|e| local(format!("--protoset {}: {e}", path.display())))?;
    }
    if !args.protos.is_empty() {
        let set = parse_protos(args)?;
        pool.add_file_descriptor_protos(set.file)
            .map_err(|e| local(format!("--proto: {e}")))?;
    }
    let mut services: Vec<String> = pool.services().map(|s| s.full_name().to_owned()).collect();
    services.sort();
    Ok(Schema { pool, services })
}

fn parse_protos(args: &SchemaArgs) -> Result<FileDescriptorSet, Fail> {
    let mut includes = args.import_paths.clone();
    if includes.is_empty() {
        for proto in &args.protos {
            let dir = proto.parent().map(PathBuf::from).unwrap_or_default();
            includes.push(if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir
            });
        }
    }
    let mut compiler =
        protox::Compiler::new(&includes).map_err(|e| local(format!("--proto: {e}")))?;
    compiler.include_imports(true);
    for proto in &args.protos {
        compiler
            .open_file(proto)
            .map_err(|e| local(format!("--proto {}: {e}", proto.display())))?;
    }
    Ok(compiler.file_descriptor_set())
}
