//! What the reflection service knows: the registered files by name, and which file
//! defines each fully qualified symbol. Both versions of the service answer from it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use prost::Message;
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet};

use super::Error;

/// The registered files, indexed for the reflection requests.
#[derive(Debug)]
pub(crate) struct ReflectionServiceState {
    service_names: Vec<String>,
    files: HashMap<String, Arc<FileDescriptorProto>>,
    symbols: HashMap<String, Arc<FileDescriptorProto>>,
}

impl ReflectionServiceState {
    pub(crate) fn new(
        mut service_names: Vec<String>,
        encoded_file_descriptor_sets: Vec<&[u8]>,
        mut file_descriptor_sets: Vec<FileDescriptorSet>,
        use_all_service_names: bool,
    ) -> Result<Self, Error> {
        for encoded in encoded_file_descriptor_sets {
            file_descriptor_sets.push(FileDescriptorSet::decode(encoded)?);
        }
        let mut state = ReflectionServiceState {
            service_names: Vec::new(),
            files: HashMap::new(),
            symbols: HashMap::new(),
        };
        let mut all_services = Vec::new();
        for file in file_descriptor_sets.into_iter().flat_map(|set| set.file) {
            let name = file
                .name
                .clone()
                .ok_or_else(|| Error::InvalidFileDescriptorSet("a file has no name".into()))?;
            // Registering the same file twice (two sets sharing an import) is fine.
            if state.files.contains_key(&name) {
                continue;
            }
            let file = Arc::new(file);
            state.files.insert(name, Arc::clone(&file));
            state.index_file(&file, &mut all_services)?;
        }
        if use_all_service_names {
            service_names = all_services;
        }
        service_names.sort();
        service_names.dedup();
        state.service_names = service_names;
        Ok(state)
    }

    fn index_file(
        &mut self,
        file: &Arc<FileDescriptorProto>,
        services: &mut Vec<String>,
    ) -> Result<(), Error> {
        let package = file.package();
        for message in &file.message_type {
            self.index_message(file, package, message)?;
        }
        for enumeration in &file.enum_type {
            self.index_enum(file, package, enumeration)?;
        }
        for service in &file.service {
            let service_name = qualified(package, "service", service.name.as_ref())?;
            for method in &service.method {
                let method_name = qualified(&service_name, "method", method.name.as_ref())?;
                self.symbols.insert(method_name, Arc::clone(file));
            }
            self.symbols.insert(service_name.clone(), Arc::clone(file));
            services.push(service_name);
        }
        Ok(())
    }

    fn index_message(
        &mut self,
        file: &Arc<FileDescriptorProto>,
        prefix: &str,
        message: &DescriptorProto,
    ) -> Result<(), Error> {
        let name = qualified(prefix, "message", message.name.as_ref())?;
        for nested in &message.nested_type {
            self.index_message(file, &name, nested)?;
        }
        for enumeration in &message.enum_type {
            self.index_enum(file, &name, enumeration)?;
        }
        for field in &message.field {
            let field_name = qualified(&name, "field", field.name.as_ref())?;
            self.symbols.insert(field_name, Arc::clone(file));
        }
        for oneof in &message.oneof_decl {
            let oneof_name = qualified(&name, "oneof", oneof.name.as_ref())?;
            self.symbols.insert(oneof_name, Arc::clone(file));
        }
        self.symbols.insert(name, Arc::clone(file));
        Ok(())
    }

    fn index_enum(
        &mut self,
        file: &Arc<FileDescriptorProto>,
        prefix: &str,
        enumeration: &EnumDescriptorProto,
    ) -> Result<(), Error> {
        let name = qualified(prefix, "enum", enumeration.name.as_ref())?;
        for value in &enumeration.value {
            let value_name = qualified(&name, "enum value", value.name.as_ref())?;
            self.symbols.insert(value_name, Arc::clone(file));
        }
        self.symbols.insert(name, Arc::clone(file));
        Ok(())
    }

    /// The advertised services' full names, sorted.
    pub(crate) fn list_services(&self) -> &[String] {
        &self.service_names
    }

    /// The file defining `symbol`, then the files it imports (transitively) that are
    /// registered, each encoded: a client gets what it needs in one answer.
    pub(crate) fn file_containing_symbol(&self, symbol: &str) -> Option<Vec<Vec<u8>>> {
        self.symbols.get(symbol).map(|file| self.with_imports(file))
    }

    /// The file named `filename` and its registered imports, each encoded.
    pub(crate) fn file_by_filename(&self, filename: &str) -> Option<Vec<Vec<u8>>> {
        self.files.get(filename).map(|file| self.with_imports(file))
    }

    fn with_imports(&self, file: &Arc<FileDescriptorProto>) -> Vec<Vec<u8>> {
        let mut seen = HashSet::from([file.name()]);
        let mut order = vec![file];
        let mut next = 0;
        while let Some(current) = order.get(next) {
            next += 1;
            for import in &current.dependency {
                if let Some(imported) = self.files.get(import) {
                    if seen.insert(imported.name()) {
                        order.push(imported);
                    }
                }
            }
        }
        order.into_iter().map(|f| f.encode_to_vec()).collect()
    }
}

fn qualified(prefix: &str, kind: &str, name: Option<&String>) -> Result<String, Error> {
    let name =
        name.ok_or_else(|| Error::InvalidFileDescriptorSet(format!("a {kind} has no name")))?;
    Ok(if prefix.is_empty() {
        name.clone()
    } else {
        format!("{prefix}.{name}")
    })
}
