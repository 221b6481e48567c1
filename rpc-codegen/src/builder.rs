//! `Builder`: every option of code generation, tonic-build style.

use std::cell::RefCell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use prost_build::Module;
use prost_types::FileDescriptorSet;

use crate::service_generator::{ModAttributes, RpcServiceGenerator, Settings};
use crate::{output, parse};

/// Configures code generation; made by [`configure`](crate::configure).
///
/// Options about messages (attributes, extern paths, well-known types, `bytes`,
/// `BTreeMap`) are passed on to prost-build and mean what they mean there; paths are
/// prost-build's (`.` for everything, `.pkg.Message`, `.pkg.Message.field`).
#[derive(Debug)]
pub struct Builder {
    settings: Settings,
    prost: prost_build::Config,
    out_dir: Option<PathBuf>,
    emit_rerun_if_changed: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            settings: Settings {
                build_client: true,
                build_server: true,
                codegen_path: "::rpc_core::codegen".to_owned(),
                client_mod_attributes: ModAttributes::default(),
                server_mod_attributes: ModAttributes::default(),
            },
            prost: prost_build::Config::new(),
            out_dir: None,
            // Only build scripts get `CARGO_CFG_*`: elsewhere the lines would be noise.
            emit_rerun_if_changed: std::env::var_os("CARGO_CFG_TARGET_ARCH").is_some(),
        }
    }
}

impl Builder {
    /// Generate `<svc>_client` modules (default: yes).
    pub fn build_client(mut self, enable: bool) -> Self {
        self.settings.build_client = enable;
        self
    }

    /// Generate `<svc>_server` modules (default: yes).
    pub fn build_server(mut self, enable: bool) -> Self {
        self.settings.build_server = enable;
        self
    }

    /// Where to write the generated files (default: `$OUT_DIR`).
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.out_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Uses the existing Rust type or module `rust_path` for the proto type or package
    /// `proto_path` instead of generating it, e.g. `(".common", "::common_types")`.
    pub fn extern_path(mut self, proto_path: impl AsRef<str>, rust_path: impl AsRef<str>) -> Self {
        self.prost
            .extern_path(proto_path.as_ref(), rust_path.as_ref());
        self
    }

    /// Adds an attribute to the messages and enums matching `path`.
    pub fn type_attribute(mut self, path: impl AsRef<str>, attribute: impl AsRef<str>) -> Self {
        self.prost.type_attribute(path.as_ref(), attribute.as_ref());
        self
    }

    /// Adds an attribute to the messages matching `path`.
    pub fn message_attribute(mut self, path: impl AsRef<str>, attribute: impl AsRef<str>) -> Self {
        self.prost
            .message_attribute(path.as_ref(), attribute.as_ref());
        self
    }

    /// Adds an attribute to the enums matching `path`.
    pub fn enum_attribute(mut self, path: impl AsRef<str>, attribute: impl AsRef<str>) -> Self {
        self.prost.enum_attribute(path.as_ref(), attribute.as_ref());
        self
    }

    /// Adds an attribute to the message fields matching `path`.
    pub fn field_attribute(mut self, path: impl AsRef<str>, attribute: impl AsRef<str>) -> Self {
        self.prost
            .field_attribute(path.as_ref(), attribute.as_ref());
        self
    }

    /// Adds an attribute to the `<svc>_client` modules of the services matching
    /// `path` (`.` for all, `pkg` for a package, `pkg.Service` for one service).
    pub fn client_mod_attribute(
        mut self,
        path: impl AsRef<str>,
        attribute: impl AsRef<str>,
    ) -> Self {
        self.settings
            .client_mod_attributes
            .push(path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self
    }

    /// Adds an attribute to the `<svc>_server` modules of the services matching
    /// `path`, as [`Builder::client_mod_attribute`].
    pub fn server_mod_attribute(
        mut self,
        path: impl AsRef<str>,
        attribute: impl AsRef<str>,
    ) -> Self {
        self.settings
            .server_mod_attributes
            .push(path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self
    }

    /// Generates the `google.protobuf` types from their definitions instead of using
    /// `::prost_types` (the default, which needs `prost-types` as a dependency).
    pub fn compile_well_known_types(mut self) -> Self {
        self.prost.compile_well_known_types();
        self
    }

    /// Where the well-known types are found (default `::prost_types`).
    pub fn prost_types_path(mut self, path: impl Into<String>) -> Self {
        self.prost.prost_types_path(path);
        self
    }

    /// Where the `prost` crate is found by generated messages (default `::prost`).
    pub fn prost_path(mut self, path: impl Into<String>) -> Self {
        self.prost.prost_path(path);
        self
    }

    /// Where generated services find rpc-core's code generation support
    /// (default `::rpc_core::codegen`), for crates that rename or re-export rpc-core.
    pub fn codegen_path(mut self, path: impl Into<String>) -> Self {
        self.settings.codegen_path = path.into();
        self
    }

    /// Generates `bytes::Bytes` instead of `Vec<u8>` for the `bytes` fields matching
    /// the paths.
    pub fn bytes(mut self, paths: &[impl AsRef<str>]) -> Self {
        self.prost.bytes(paths);
        self
    }

    /// Generates `BTreeMap` instead of `HashMap` for the map fields matching the paths.
    pub fn btree_map(mut self, paths: &[impl AsRef<str>]) -> Self {
        self.prost.btree_map(paths);
        self
    }

    /// Leaves out the proto comments of the messages matching the paths (for example
    /// when they contain indented text that rustdoc would run as a doctest).
    pub fn disable_comments(mut self, paths: &[impl AsRef<str>]) -> Self {
        self.prost.disable_comments(paths);
        self
    }

    /// Prints `cargo:rerun-if-changed` for every `.proto` file read (default: only
    /// when run from a build script).
    pub fn emit_rerun_if_changed(mut self, enable: bool) -> Self {
        self.emit_rerun_if_changed = enable;
        self
    }

    /// Compiles `protos`, looking up imports in `includes`, and writes one
    /// `<package>.rs` per package.
    ///
    /// # Errors
    /// A file that does not parse or resolve (with its line and column), a streaming
    /// method (named), two methods with the same Rust name, an output directory that
    /// cannot be written.
    pub fn compile_protos(
        self,
        protos: &[impl AsRef<Path>],
        includes: &[impl AsRef<Path>],
    ) -> io::Result<()> {
        let fds = parse::parse(protos, includes, self.emit_rerun_if_changed)?;
        self.compile_fds(fds)
    }

    /// As [`Builder::compile_protos`], from an already parsed descriptor set (which
    /// must include the imported files, and source info for comments to be kept).
    pub fn compile_fds(mut self, fds: FileDescriptorSet) -> io::Result<()> {
        let out_dir = match self.out_dir.take() {
            Some(dir) => dir,
            None => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                .ok_or_else(|| {
                    io::Error::other(
                        "OUT_DIR is not set: call compile_protos from a build script, \
                     or set Builder::out_dir",
                    )
                })?,
        };
        let errors = Rc::new(RefCell::new(Vec::new()));
        if self.settings.build_client || self.settings.build_server {
            self.prost.service_generator(Box::new(RpcServiceGenerator {
                settings: self.settings.clone(),
                errors: Rc::clone(&errors),
            }));
        }
        // Formatting is done by `output`, which reports bad code instead of panicking.
        self.prost.format(false);
        let requests = fds
            .file
            .into_iter()
            .map(|file| (Module::from_protobuf_package_name(file.package()), file))
            .collect();
        let modules = self.prost.generate(requests)?;
        let errors = errors.take();
        if !errors.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("rpc-codegen: {}", errors.join("\nrpc-codegen: ")),
            ));
        }
        output::write_modules(&out_dir, modules)
    }
}
