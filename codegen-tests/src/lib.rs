//! The code rpc-codegen generates for the repository's protos (`proto/`) and for this
//! crate's own (`protos/`, which cover every case the generator must handle), plus a
//! [`loopback`] transport that connects a generated client to a generated server in
//! process, for the tests in `tests/`.
//!
//! Modules mirror the proto packages, as they must for cross-package references
//! (`a.b.c` refers to `common` as `super::super::super::common`).
#![forbid(unsafe_code)]

pub mod loopback;

// Generated messages carry only the docs their protos have (all generated service
// items are documented).

/// Every package above again, through the include file the build script asked for
/// (`Builder::include_file`), nested by package name.
#[allow(missing_docs)]
pub mod all {
    include!(concat!(env!("OUT_DIR"), "/all_protos.rs"));
}

/// `proto/helloworld.proto`.
#[allow(missing_docs)]
pub mod helloworld {
    rpc_core::include_proto!("helloworld");
}

/// `proto/echo.proto`.
#[allow(missing_docs)]
pub mod echo {
    rpc_core::include_proto!("echo");
}

/// `proto/kv.proto`.
#[allow(missing_docs)]
pub mod kv {
    rpc_core::include_proto!("kv");
}

/// `proto/route_guide.proto`: a method of each call shape.
#[allow(missing_docs)]
pub mod routeguide {
    rpc_core::include_proto!("routeguide");
}

/// `protos/common/types.proto`: imported by `a.b.c`.
#[allow(missing_docs)]
pub mod common {
    rpc_core::include_proto!("common");
}

/// Nested packages.
pub mod a {
    /// Nested packages.
    pub mod b {
        /// `protos/a/b/c/store.proto`.
        #[allow(missing_docs)]
        pub mod c {
            rpc_core::include_proto!("a.b.c");
        }
    }
}

/// `protos/naming.proto`: keywords and helper names.
#[allow(missing_docs)]
pub mod naming {
    rpc_core::include_proto!("naming");
}

/// `protos/multi.proto`: two services in one file.
#[allow(missing_docs)]
pub mod multi {
    rpc_core::include_proto!("multi");
}

/// `protos/nopackage.proto`: no `package` line, so `_.rs`.
#[allow(missing_docs)]
pub mod nopackage {
    rpc_core::include_proto!("_");
}

/// The same protos generated with `use_arc_self(true)` and
/// `generate_default_stubs(true)`.
pub mod variants {
    /// `proto/helloworld.proto`.
    #[allow(missing_docs)]
    pub mod helloworld {
        include!(concat!(env!("OUT_DIR"), "/variants/helloworld.rs"));
    }

    /// `proto/echo.proto`.
    #[allow(missing_docs)]
    pub mod echo {
        include!(concat!(env!("OUT_DIR"), "/variants/echo.rs"));
    }

    /// `proto/route_guide.proto`.
    #[allow(missing_docs)]
    pub mod routeguide {
        include!(concat!(env!("OUT_DIR"), "/variants/routeguide.rs"));
    }
}
