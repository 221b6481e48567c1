//! Generated protobuf types of the `grpc.reflection` packages.

/// The `grpc.reflection.v1` package.
#[allow(missing_docs, unreachable_pub)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/grpc.reflection.v1.rs"));

    /// The encoded `FileDescriptorSet` of `grpc/reflection/v1/reflection.proto`.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(
        env!("OUT_DIR"),
        "/grpc_reflection_v1_descriptor.bin"
    ));
}

/// The `grpc.reflection.v1alpha` package.
#[allow(missing_docs, unreachable_pub)]
pub mod v1alpha {
    include!(concat!(env!("OUT_DIR"), "/grpc.reflection.v1alpha.rs"));

    /// The encoded `FileDescriptorSet` of `grpc/reflection/v1alpha/reflection.proto`.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(
        env!("OUT_DIR"),
        "/grpc_reflection_v1alpha_descriptor.bin"
    ));
}
