//! What generated code refers to: one path to import, so generated code does not
//! depend on the user's own dependencies.

pub use async_trait::async_trait;
pub use prost;
pub use std::future::Future;
pub use std::pin::Pin;
pub use std::sync::Arc;
pub use std::task::{Context, Poll};
pub use tower::Service;

pub use crate::client::{Grpc, IncomingReply, OutgoingCall};
pub use crate::request::{IntoRequest, Request};
pub use crate::response::Response;
pub use crate::server::{
    BoxFuture, BoxMessage, EncodeMessage, NamedService, ServerCall, ServerReply,
};
pub use crate::status::Status;
pub use crate::transport::{Channel, Error as TransportError};
