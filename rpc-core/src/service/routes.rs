//! [`Routes`]: a server's services by name, as one tower service that dispatches
//! each call to the service of its name. A server's layers wrap it.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::util::{BoxCloneSyncService, Oneshot};
use tower::{Service, ServiceExt};

use super::ResponseFuture;
use crate::server::{RoutableService, ServerCall, ServerReply};
use crate::status::Status;

/// One route: any service (or middleware stack) of the generated types, its errors
/// already mapped to a [`Status`].
pub(crate) type Route = BoxCloneSyncService<ServerCall, ServerReply, Status>;

/// The services a server was given, by [`NamedService::NAME`](crate::server::NamedService::NAME):
/// a `Service<ServerCall>` that runs each call on the service its path names, and
/// answers `UNIMPLEMENTED` for a service it does not have. It is what the layers of
/// [`Server::layer`](crate::transport::Server::layer) wrap.
///
/// Cheap to clone (the table is shared). Each call runs on a clone of its route,
/// made ready with `poll_ready` first, so `poll_ready` here is always ready.
#[derive(Clone, Default)]
pub struct Routes {
    /// Sorted by name: a lookup is a binary search of byte comparisons (a server has
    /// a handful of services), with no hashing and no UTF-8 check per call.
    table: Arc<Vec<(&'static str, Route)>>,
}

impl Routes {
    /// Adds `svc` under its name (replacing a service added before under the same
    /// name). Its errors become a `Status` here, once, by [`Status::from_error`]; the
    /// mapping lives inside the boxed future, so it costs no allocation of its own.
    pub(crate) fn add<S: RoutableService>(&mut self, svc: S) {
        let svc = svc.map_err(|e: S::Error| Status::from_error(e.into()));
        let route = BoxCloneSyncService::new(svc);
        let table = Arc::make_mut(&mut self.table);
        match table.binary_search_by(|(name, _)| name.cmp(&S::NAME)) {
            Ok(i) => table[i].1 = route,
            Err(i) => table.insert(i, (S::NAME, route)),
        }
    }

    /// A clone of the route of service `name` (`UNIMPLEMENTED` without one), ready
    /// to be driven through one call.
    pub(crate) fn get(&self, name: &[u8]) -> Result<Route, Status> {
        match self.table.binary_search_by(|(n, _)| n.as_bytes().cmp(name)) {
            Ok(i) => Ok(self.table[i].1.clone()),
            Err(_) => Err(Status::unimplemented(format!(
                "unknown service {}",
                String::from_utf8_lossy(name)
            ))),
        }
    }

    /// Runs `call` on a clone of the route its service names.
    pub(crate) fn route(&self, call: ServerCall) -> ResponseFuture<Oneshot<Route, ServerCall>> {
        match self.get(call.service_bytes()) {
            Ok(route) => ResponseFuture::inner(route.oneshot(call)),
            Err(status) => ResponseFuture::ended(status),
        }
    }
}

impl Service<ServerCall> for Routes {
    type Response = ServerReply;
    type Error = Status;
    type Future = ResponseFuture<Oneshot<Route, ServerCall>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        self.route(call)
    }
}

impl fmt::Debug for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.table.iter().map(|(name, _)| name))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::future::{ready, Ready};
    use std::task::{Context, Poll};

    use super::*;
    use crate::code::Code;
    use crate::metadata::{AsciiMetadataValue, MetadataMap};
    use crate::payload::Payload;
    use crate::server::NamedService;
    use tower::Service;

    /// An error that is not a `Status`, with `source` as its cause.
    #[derive(Debug)]
    struct Wrapped(
        &'static str,
        Option<Box<dyn std::error::Error + Send + Sync>>,
    );

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    fn boxed(e: impl std::error::Error + Send + Sync + 'static) -> Status {
        Status::from_error(Box::new(e))
    }

    #[test]
    fn errors_map_to_statuses_once() {
        let mut own = Status::permission_denied("no");
        own.metadata_mut()
            .insert("k", AsciiMetadataValue::from_static("v"));
        let s = boxed(own.clone());
        assert_eq!((s.code(), s.message()), (Code::PermissionDenied, "no"));
        assert_eq!(
            s.metadata().get("k").and_then(|v| v.to_str().ok()),
            Some("v"),
            "the status is unchanged"
        );

        let s = boxed(tower::timeout::error::Elapsed::new());
        assert_eq!(s.code(), Code::DeadlineExceeded);
        let s = boxed(tower::load_shed::error::Overloaded::new());
        assert_eq!(s.code(), Code::ResourceExhausted);

        let s = boxed(Wrapped("disk on fire", None));
        assert_eq!((s.code(), s.message()), (Code::Unknown, "disk on fire"));

        // A recognised error found among the sources decides.
        let s = boxed(Wrapped("outer", Some(Box::new(own))));
        assert_eq!((s.code(), s.message()), (Code::PermissionDenied, "no"));
        let s = boxed(Wrapped(
            "outer",
            Some(Box::new(tower::timeout::error::Elapsed::new())),
        ));
        assert_eq!(s.code(), Code::DeadlineExceeded);
    }

    /// A named service failing every call with an error that is not a `Status`.
    #[derive(Clone)]
    struct Failing;

    impl NamedService for Failing {
        const NAME: &'static str = "test.Failing";
    }

    impl Service<ServerCall> for Failing {
        type Response = ServerReply;
        type Error = std::io::Error;
        type Future = Ready<Result<ServerReply, std::io::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: ServerCall) -> Self::Future {
            ready(Err(std::io::Error::other("the handler's own error")))
        }
    }

    #[tokio::test]
    async fn a_route_ends_calls_with_mapped_statuses() {
        let mut routes = Routes::default();
        routes.add(Failing);
        let path = b"/test.Failing/Call";
        let call = ServerCall::from_parts(
            Payload::from_vec(path.to_vec()),
            0..path.len(),
            path.len()..path.len(),
            MetadataMap::new(),
            None,
        )
        .unwrap();
        let s = routes.route(call).await.unwrap_err();
        assert_eq!(
            (s.code(), s.message()),
            (Code::Unknown, "the handler's own error")
        );
        let other = b"/test.Other/Call";
        let call = ServerCall::from_parts(
            Payload::from_vec(other.to_vec()),
            0..other.len(),
            other.len()..other.len(),
            MetadataMap::new(),
            None,
        )
        .unwrap();
        let s = routes.oneshot(call).await.unwrap_err();
        assert_eq!(
            (s.code(), s.message()),
            (Code::Unimplemented, "unknown service test.Other")
        );
    }
}
