//! `Extensions`: a type map of values that travel with a request or a response inside
//! one process (an interceptor's findings for the handler, a layer's for the caller),
//! never on the wire.
//!
//! It is `http::Extensions` itself, as in tonic 0.14 (`tonic::Extensions` is a
//! re-export of it): a value put there by tower or http middleware is the same value
//! a handler reads, and a ported program names the same type. Values are keyed by
//! their type and must be `Clone + Send + Sync + 'static`; cloning the map clones
//! every value.
//!
//! ```
//! use rpc_core::Extensions;
//!
//! #[derive(Clone, Debug, PartialEq)]
//! struct User(&'static str);
//!
//! let mut ext = Extensions::new();
//! assert!(ext.insert(User("alice")).is_none());
//! assert_eq!(ext.get::<User>(), Some(&User("alice")));
//! assert_eq!(ext.remove::<User>(), Some(User("alice")));
//! assert!(ext.is_empty());
//! ```

pub use http::Extensions;

/// The gRPC service and method of a client's call, as tonic's `GrpcMethod`: in the
/// extensions of the request a client interceptor sees (tonic's generated clients
/// put it in every request; here it is added where an interceptor runs, so a client
/// without one does not pay for it).
#[derive(Debug, Clone)]
pub struct GrpcMethod<'a> {
    service: &'a str,
    method: &'a str,
}

impl<'a> GrpcMethod<'a> {
    /// The method `method` of service `service` (e.g. `helloworld.Greeter`, `SayHello`).
    #[doc(hidden)]
    pub fn new(service: &'a str, method: &'a str) -> Self {
        GrpcMethod { service, method }
    }

    /// The service and method of a call's path, `/package.Service/Method`.
    pub(crate) fn of_path(path: &'a str) -> Self {
        let path = path.strip_prefix('/').unwrap_or(path);
        let (service, method) = path.rsplit_once('/').unwrap_or(("", path));
        GrpcMethod { service, method }
    }

    /// The gRPC service's full name.
    pub fn service(&self) -> &str {
        self.service
    }

    /// The method's name.
    pub fn method(&self) -> &str {
        self.method
    }
}

#[cfg(test)]
mod tests {
    use super::GrpcMethod;

    #[test]
    fn a_path_splits_into_service_and_method() {
        let m = GrpcMethod::of_path("/shop.v1.Inventory/GetItem");
        assert_eq!((m.service(), m.method()), ("shop.v1.Inventory", "GetItem"));
    }
}
