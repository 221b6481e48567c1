//! The generic client that generated stubs wrap.

mod call;
mod grpc;

pub use call::{IncomingReply, OutgoingCall};
pub use grpc::Grpc;
