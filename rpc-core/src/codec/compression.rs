//! tonic's `CompressionEncoding`, accepted so that a tonic program's compression
//! settings build unchanged.
//!
//! rdma-rpc compresses nothing: an RDMA fabric moves a message without copying it,
//! and compressing would add the copies (and the CPU) back. A generated client's or
//! server's `send_compressed`/`accept_compressed` therefore changes nothing: every
//! message travels as it is, and both ends read it, whatever either asked for.

/// A compression encoding, as tonic names it. Accepted by the generated
/// `send_compressed`/`accept_compressed`, which have no effect here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CompressionEncoding {
    /// gzip.
    Gzip,
    /// zstd.
    Zstd,
    /// deflate.
    Deflate,
}
