//! Tower services around calls, as `tonic::service`: [`Interceptor`]s and
//! [`InterceptedService`] (client and server), [`InterceptorLayer`], and [`Routes`],
//! the service a server's layers wrap.

mod future;
pub mod interceptor;
mod routes;
mod routes_builder;

pub use future::ResponseFuture;
#[doc(inline)]
pub use interceptor::{InterceptedService, Interceptor, InterceptorLayer};
pub(crate) use routes::Route;
pub use routes::Routes;
pub use routes_builder::RoutesBuilder;
