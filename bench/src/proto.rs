//! The benchmark services' generated code, once per framework.

/// rdma-rpc's stubs for `proto/echo.proto` (the run connects its own `Channel`).
#[allow(missing_docs, unreachable_pub, dead_code)]
pub(crate) mod rdma {
    include!(concat!(env!("OUT_DIR"), "/rdma/echo.rs"));
}

/// tonic's stubs for `proto/echo.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub(crate) mod tonic {
    include!(concat!(env!("OUT_DIR"), "/tonic/echo.rs"));
}

/// rdma-rpc's stubs for `proto/echo_stream.proto`.
#[allow(missing_docs, unreachable_pub, dead_code)]
pub(crate) mod rdma_stream {
    include!(concat!(env!("OUT_DIR"), "/rdma/echo_stream.rs"));
}

/// tonic's stubs for `proto/echo_stream.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub(crate) mod tonic_stream {
    include!(concat!(env!("OUT_DIR"), "/tonic/echo_stream.rs"));
}

/// rdma-rpc's stubs for `proto/upload.proto`.
#[allow(missing_docs, unreachable_pub, dead_code)]
pub(crate) mod rdma_upload {
    include!(concat!(env!("OUT_DIR"), "/rdma/upload.rs"));
}

/// tonic's stubs for `proto/upload.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub(crate) mod tonic_upload {
    include!(concat!(env!("OUT_DIR"), "/tonic/upload.rs"));
}
