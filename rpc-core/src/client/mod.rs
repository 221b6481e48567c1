//! The generic client that generated stubs wrap.

mod call;
mod grpc;

pub use call::{IncomingReply, IncomingStream, OutgoingCall, OutgoingStream};
pub use grpc::Grpc;
