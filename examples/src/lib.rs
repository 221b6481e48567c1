//! Services shared by the example programs: the generated code of `proto/` and the
//! example implementations (greeter, key-value store).
#![forbid(unsafe_code)]

pub mod checksum;
pub mod child;
pub mod file_store;
pub mod greeter;
pub mod kv_store;
pub mod route_guide;
pub mod rss_parts;

/// `proto/helloworld.proto`.
#[allow(missing_docs, unreachable_pub)]
pub mod hello_world {
    rpc_core::include_proto!("helloworld");
}

/// `proto/kv.proto`.
#[allow(missing_docs, unreachable_pub)]
pub mod kv {
    rpc_core::include_proto!("kv");
}

/// `proto/route_guide.proto`.
#[allow(missing_docs, unreachable_pub)]
pub mod routeguide {
    rpc_core::include_proto!("routeguide");
}

/// `proto/file_transfer.proto`.
#[allow(missing_docs, unreachable_pub)]
pub mod filetransfer {
    rpc_core::include_proto!("filetransfer");
}

/// `proto/echo.proto`.
#[allow(missing_docs, unreachable_pub)]
pub mod echo {
    rpc_core::include_proto!("echo");
}

/// The encoded `FileDescriptorSet` of every proto above, for the servers' reflection
/// service (`rpc_reflection::server::Builder::register_encoded_file_descriptor_set`).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    rpc_core::include_file_descriptor_set!("examples_descriptor");

/// Sets up `tracing` output, filtered by `RUST_LOG` (default: info).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal; logs go to stderr so a program's own output stays clean.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}
