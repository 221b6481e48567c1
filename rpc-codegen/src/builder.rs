//! `Builder`: every option of code generation, tonic-build style.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use prost::Message as _;
use prost_build::{Config, Module};
use prost_types::FileDescriptorSet;

use crate::service_generator::{ModAttributes, RpcServiceGenerator, Settings};
use crate::{include_file, manifest, output, parse};

/// Configures code generation; made by [`configure`](crate::configure). Its methods
/// are tonic-build's (`tonic_prost_build::Builder` in tonic 0.14) where tonic has
/// them, with the same signatures, so a tonic `build.rs` ports by renaming the crate;
/// the few left out are listed in the crate's README.
///
/// Options about messages (attributes, extern paths, well-known types, `bytes`,
/// `BTreeMap`) are passed on to prost-build and mean what they mean there; paths are
/// prost-build's (`.` for everything, `.pkg.Message`, `.pkg.Message.field`).
#[derive(Clone)]
pub struct Builder {
    settings: Settings,
    /// Set by [`Builder::codegen_path`]; else found in the crate's manifest.
    codegen_path: Option<String>,
    /// Applied to the prost-build `Config` at compile time, in order, so that
    /// [`Builder::compile_with_config`] can apply them to the caller's.
    prost: Vec<ProstOption>,
    out_dir: Option<PathBuf>,
    file_descriptor_set_path: Option<PathBuf>,
    /// Set by [`Builder::include_file`]: relative to the output directory.
    include_file: Option<PathBuf>,
    emit_rerun_if_changed: bool,
}

/// One prost-build option, applied to a `Config` at compile time.
type ProstOption = Rc<dyn Fn(&mut Config)>;

impl Default for Builder {
    fn default() -> Self {
        Builder {
            settings: Settings {
                build_client: true,
                build_server: true,
                build_transport: true,
                codegen_path: String::new(),
                proto_path: "super".to_owned(),
                emit_package: true,
                use_arc_self: false,
                generate_default_stubs: false,
                client_mod_attributes: ModAttributes::default(),
                server_mod_attributes: ModAttributes::default(),
                client_attributes: ModAttributes::default(),
                server_attributes: ModAttributes::default(),
                trait_attributes: ModAttributes::default(),
                disable_comments: Vec::new(),
            },
            codegen_path: None,
            prost: Vec::new(),
            out_dir: None,
            file_descriptor_set_path: None,
            include_file: None,
            // Only build scripts get `CARGO_CFG_*`: elsewhere the lines would be noise.
            emit_rerun_if_changed: std::env::var_os("CARGO_CFG_TARGET_ARCH").is_some(),
        }
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("settings", &self.settings)
            .field("codegen_path", &self.codegen_path)
            .field("prost_options", &self.prost.len())
            .field("out_dir", &self.out_dir)
            .field("file_descriptor_set_path", &self.file_descriptor_set_path)
            .field("emit_rerun_if_changed", &self.emit_rerun_if_changed)
            .finish()
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

    /// Generate the clients' `connect` (default: yes). Without it, a client is made
    /// with `new` over a transport service of the caller's (a `Channel` built from an
    /// `Endpoint`, a mock, a middleware stack).
    pub fn build_transport(mut self, enable: bool) -> Self {
        self.settings.build_transport = enable;
        self
    }

    /// Where to write the generated files (default: `$OUT_DIR`).
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.out_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Also writes the parsed protos, imports included, as an encoded
    /// `FileDescriptorSet` to `path` (for reflection, or `prost-reflect`).
    pub fn file_descriptor_set_path(mut self, path: impl AsRef<Path>) -> Self {
        self.file_descriptor_set_path = Some(path.as_ref().to_owned());
        self
    }

    /// Also writes `path` (in the output directory): every generated package as
    /// nested `pub mod`s that include its file, as tonic-prost-build's. Then
    /// `include!(concat!(env!("OUT_DIR"), "/<path>"));` brings them all in.
    pub fn include_file(mut self, path: impl AsRef<Path>) -> Self {
        self.include_file = Some(path.as_ref().to_owned());
        self
    }

    fn prost(mut self, option: impl Fn(&mut Config) + 'static) -> Self {
        self.prost.push(Rc::new(option));
        self
    }

    /// Uses the existing Rust type or module `rust_path` for the proto type or package
    /// `proto_path` instead of generating it, e.g. `(".common", "::common_types")`.
    pub fn extern_path(self, proto_path: impl AsRef<str>, rust_path: impl AsRef<str>) -> Self {
        let (proto, rust) = (
            proto_path.as_ref().to_owned(),
            rust_path.as_ref().to_owned(),
        );
        self.prost(move |c| {
            c.extern_path(&proto, &rust);
        })
    }

    /// Adds an attribute to the messages and enums matching `path`.
    pub fn type_attribute<P: AsRef<str>, A: AsRef<str>>(self, path: P, attribute: A) -> Self {
        let (path, attr) = (path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self.prost(move |c| {
            c.type_attribute(&path, &attr);
        })
    }

    /// Adds an attribute to the messages matching `path`.
    pub fn message_attribute<P: AsRef<str>, A: AsRef<str>>(self, path: P, attribute: A) -> Self {
        let (path, attr) = (path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self.prost(move |c| {
            c.message_attribute(&path, &attr);
        })
    }

    /// Adds an attribute to the enums matching `path`.
    pub fn enum_attribute<P: AsRef<str>, A: AsRef<str>>(self, path: P, attribute: A) -> Self {
        let (path, attr) = (path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self.prost(move |c| {
            c.enum_attribute(&path, &attr);
        })
    }

    /// Adds an attribute to the message fields matching `path`.
    pub fn field_attribute<P: AsRef<str>, A: AsRef<str>>(self, path: P, attribute: A) -> Self {
        let (path, attr) = (path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self.prost(move |c| {
            c.field_attribute(&path, &attr);
        })
    }

    /// Boxes the message fields matching `path` (`Option<Box<M>>`).
    pub fn boxed<P: AsRef<str>>(self, path: P) -> Self {
        let path = path.as_ref().to_owned();
        self.prost(move |c| {
            c.boxed(&path);
        })
    }

    /// Generates `BTreeMap` instead of `HashMap` for the map fields matching `path`.
    pub fn btree_map<P: AsRef<str>>(self, path: P) -> Self {
        let path = path.as_ref().to_owned();
        self.prost(move |c| {
            c.btree_map([&path]);
        })
    }

    /// Generates `bytes::Bytes` instead of `Vec<u8>` for the `bytes` fields matching
    /// `path` (`.` for all).
    pub fn bytes<P: AsRef<str>>(self, path: P) -> Self {
        let path = path.as_ref().to_owned();
        self.prost(move |c| {
            c.bytes([&path]);
        })
    }

    /// Leaves `Debug` out of the derives of the messages matching the paths, for a
    /// `Debug` of your own.
    pub fn skip_debug<I, S>(self, paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let paths: Vec<String> = paths.into_iter().map(|p| p.as_ref().to_owned()).collect();
        self.prost(move |c| {
            c.skip_debug(&paths);
        })
    }

    /// Adds an attribute to the `<svc>_client` modules of the services matching
    /// `path` (`.` for all, `pkg` for a package, `pkg.Service` for one service).
    pub fn client_mod_attribute<P: AsRef<str>, A: AsRef<str>>(
        mut self,
        path: P,
        attribute: A,
    ) -> Self {
        self.settings
            .client_mod_attributes
            .push(path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self
    }

    /// Adds an attribute to the `<Svc>Client` structs of the services matching
    /// `path`, as [`Builder::client_mod_attribute`].
    pub fn client_attribute<P: AsRef<str>, A: AsRef<str>>(mut self, path: P, attribute: A) -> Self {
        self.settings
            .client_attributes
            .push(path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self
    }

    /// Adds an attribute to the `<svc>_server` modules of the services matching
    /// `path`, as [`Builder::client_mod_attribute`].
    pub fn server_mod_attribute<P: AsRef<str>, A: AsRef<str>>(
        mut self,
        path: P,
        attribute: A,
    ) -> Self {
        self.settings
            .server_mod_attributes
            .push(path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self
    }

    /// Adds an attribute to the `<Svc>Server` structs of the services matching
    /// `path`, as [`Builder::client_mod_attribute`].
    pub fn server_attribute<P: AsRef<str>, A: AsRef<str>>(mut self, path: P, attribute: A) -> Self {
        self.settings
            .server_attributes
            .push(path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self
    }

    /// Adds an attribute to the server traits of the services matching `path`, as
    /// [`Builder::client_mod_attribute`].
    pub fn trait_attribute<P: AsRef<str>, A: AsRef<str>>(mut self, path: P, attribute: A) -> Self {
        self.settings
            .trait_attributes
            .push(path.as_ref().to_owned(), attribute.as_ref().to_owned());
        self
    }

    /// Where generated services find the messages, from inside their
    /// `<svc>_client`/`<svc>_server` modules (default `super`, the package's module).
    /// With messages generated elsewhere, pair it with [`Builder::extern_path`].
    pub fn proto_path(mut self, proto_path: impl AsRef<str>) -> Self {
        self.settings.proto_path = proto_path.as_ref().to_owned();
        self
    }

    /// Generates the `google.protobuf` types from their definitions instead of using
    /// `::prost_types` (the default, which needs `prost-types` as a dependency).
    pub fn compile_well_known_types(self, enable: bool) -> Self {
        if !enable {
            return self;
        }
        self.prost(|c| {
            c.compile_well_known_types();
        })
    }

    /// Whether the proto package is part of the service's name, and so of its call
    /// paths (`/helloworld.Greeter/SayHello`; without: `/Greeter/SayHello`). Default
    /// yes; client and server must agree.
    pub fn emit_package(mut self, enable: bool) -> Self {
        self.settings.emit_package = enable;
        self
    }

    /// Server trait methods take `self: Arc<Self>` instead of `&self`, for handlers
    /// that hand `self` to a spawned task.
    pub fn use_arc_self(mut self, enable: bool) -> Self {
        self.settings.use_arc_self = enable;
        self
    }

    /// Server trait methods get a default body that answers `UNIMPLEMENTED`, so an
    /// implementation may leave some out.
    pub fn generate_default_stubs(mut self, enable: bool) -> Self {
        self.settings.generate_default_stubs = enable;
        self
    }

    /// Where the well-known types are found (default `::prost_types`).
    pub fn prost_types_path(self, path: impl Into<String>) -> Self {
        let path = path.into();
        self.prost(move |c| {
            c.prost_types_path(&path);
        })
    }

    /// Where the `prost` crate is found by generated messages (default `::prost`).
    pub fn prost_path(self, path: impl Into<String>) -> Self {
        let path = path.into();
        self.prost(move |c| {
            c.prost_path(&path);
        })
    }

    /// Where generated services find rpc-core's code generation support.
    ///
    /// Without it, the crate being built is asked: its `Cargo.toml` (in
    /// `$CARGO_MANIFEST_DIR`) is read for the name it gives rpc-core (`::rpc_core`
    /// for `rpc-core = ..`, `::tonic` for `tonic = { package = "rpc-core", .. }`,
    /// following `workspace = true` to the workspace's manifest) and the path is
    /// `<that>::codegen`. When none is found, `::rpc_core::codegen` is used and the
    /// build prints a warning saying what was looked for. Set this when rpc-core is
    /// reached another way, e.g. through a crate that re-exports it
    /// (`"::my_framework::rpc::codegen"`).
    pub fn codegen_path(mut self, path: impl Into<String>) -> Self {
        self.codegen_path = Some(path.into());
        self
    }

    /// Accepted for tonic-prost-build's build scripts and ignored: protox compiles the
    /// protos and no `protoc` runs (proto3 `optional`, which the usual
    /// `--experimental_allow_proto3_optional` turns on, always is).
    #[must_use]
    pub fn protoc_arg<A: AsRef<str>>(self, _arg: A) -> Self {
        self
    }

    /// Leaves out the proto comments of the messages, services and methods matching
    /// the paths (`.pkg.Service`, `.pkg.Service.Method`), for example when they
    /// contain indented text that rustdoc would run as a doctest.
    pub fn disable_comments<I, S>(mut self, paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let paths: Vec<String> = paths.into_iter().map(|p| p.as_ref().to_owned()).collect();
        self.settings.disable_comments.extend(paths.iter().cloned());
        self.prost(move |c| {
            c.disable_comments(&paths);
        })
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
    /// A file that does not parse or resolve (with its line and column), two methods
    /// with the same Rust name, an output directory that cannot be written.
    pub fn compile_protos<P: AsRef<Path>>(self, protos: &[P], includes: &[P]) -> io::Result<()> {
        self.compile_with_config(Config::new(), protos, includes)
    }

    /// As [`Builder::compile_protos`], starting from a prost-build `Config` of the
    /// caller's (for prost options this builder does not mirror); the builder's own
    /// options are applied on top of it. Its output directory, formatting and
    /// service generator are the builder's.
    ///
    /// # Errors
    /// As [`Builder::compile_protos`].
    pub fn compile_with_config<P: AsRef<Path>>(
        self,
        config: Config,
        protos: &[P],
        includes: &[P],
    ) -> io::Result<()> {
        let fds = parse::parse(protos, includes, self.emit_rerun_if_changed)?;
        self.compile_fds_with_config(fds, config)
    }

    /// As [`Builder::compile_protos`], from an already parsed descriptor set (which
    /// must include the imported files, and source info for comments to be kept).
    ///
    /// # Errors
    /// As [`Builder::compile_protos`].
    pub fn compile_fds(self, fds: FileDescriptorSet) -> io::Result<()> {
        self.compile_fds_with_config(fds, Config::new())
    }

    /// As [`Builder::compile_fds`], starting from the caller's prost-build `Config`
    /// (see [`Builder::compile_with_config`]).
    ///
    /// # Errors
    /// As [`Builder::compile_protos`].
    pub fn compile_fds_with_config(
        mut self,
        fds: FileDescriptorSet,
        mut config: Config,
    ) -> io::Result<()> {
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
        if let Some(path) = &self.file_descriptor_set_path {
            std::fs::write(path, fds.encode_to_vec()).map_err(|e| {
                io::Error::new(e.kind(), format!("writing {}: {e}", path.display()))
            })?;
        }
        for option in &self.prost {
            option(&mut config);
        }
        let errors = Rc::new(RefCell::new(Vec::new()));
        if self.settings.build_client || self.settings.build_server {
            self.settings.codegen_path = match self.codegen_path.take() {
                Some(path) => path,
                None => format!("{}::codegen", rpc_core_path()),
            };
            config.service_generator(Box::new(RpcServiceGenerator {
                settings: self.settings.clone(),
                errors: Rc::clone(&errors),
            }));
        }
        // Formatting is done by `output`, which reports bad code instead of panicking.
        config.format(false);
        let requests = fds
            .file
            .into_iter()
            .map(|file| (Module::from_protobuf_package_name(file.package()), file))
            .collect();
        let modules = config.generate(requests)?;
        let errors = errors.take();
        if !errors.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("rpc-codegen: {}", errors.join("\nrpc-codegen: ")),
            ));
        }
        let names: Vec<Module> = modules.keys().cloned().collect();
        output::write_modules(&out_dir, modules)?;
        match &self.include_file {
            Some(path) => output::write_file(&out_dir.join(path), &include_file::render(&names)),
            None => Ok(()),
        }
    }
}

/// rpc-core's path in the crate being built, as its manifest says; `::rpc_core`
/// with a warning when the manifest does not say.
fn rpc_core_path() -> String {
    manifest::crate_path_from_env().unwrap_or_else(|why| {
        println!(
            "cargo:warning=rpc-codegen: generated code names rpc-core `::rpc_core`, since \
             {why}; if rpc-core is reached another way, set Builder::codegen_path"
        );
        "::rpc_core".to_owned()
    })
}
