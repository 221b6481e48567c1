//! [`Routes`]: a server's services by name, as one tower service that dispatches
//! each call to the service of its name. A server's layers wrap it.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt};

use super::ResponseFuture;
use crate::server::{BoxFuture, CallService, RoutableService, ServerCall, ServerReply};
use crate::status::Status;

/// A service (or middleware stack) boxed once, its errors mapped to a [`Status`]:
/// the server's stack of layers.
pub(crate) type Route = BoxCloneSyncService<ServerCall, ServerReply, Status>;

/// The future of one call on a route.
pub(crate) type RouteFuture = BoxFuture<ServerReply>;

/// The services a server was given, by [`NamedService::NAME`](crate::server::NamedService::NAME):
/// a `Service<ServerCall>` that runs each call on the service its path names, and
/// answers `UNIMPLEMENTED` for a service it does not have. It is what the layers of
/// [`Server::layer`](crate::transport::Server::layer) wrap.
///
/// Cheap to clone (the table is shared). Each call runs on a clone of its service,
/// made ready with `poll_ready` first, so `poll_ready` here is always ready.
#[derive(Clone, Default)]
pub struct Routes {
    /// Sorted by name: a lookup is a binary search of byte comparisons (a server has
    /// a handful of services), with no hashing and no UTF-8 check per call.
    table: Arc<Vec<(&'static str, Box<dyn Entry>)>>,
}

/// One service of the table, called through `&self`: each call clones the service
/// itself (a generated server's clone is a reference count), not a box around it.
trait Entry: Send + Sync {
    fn dispatch(&self, call: ServerCall) -> RouteFuture;
    fn clone_entry(&self) -> Box<dyn Entry>;
}

impl<S: CallService> Entry for S {
    fn dispatch(&self, call: ServerCall) -> RouteFuture {
        let mut svc = self.clone();
        // Generated servers are always ready; anything else waits in the future.
        match svc.poll_ready(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(())) => boxed_once(Service::call(&mut svc, call)),
            Poll::Ready(Err(e)) => {
                let status = status_of(e);
                Box::pin(async move { Err(status) })
            }
            Poll::Pending => Box::pin(async move {
                let svc = svc.ready().await.map_err(status_of)?;
                Service::call(svc, call).await.map_err(status_of)
            }),
        }
    }

    fn clone_entry(&self) -> Box<dyn Entry> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn Entry> {
    fn clone(&self) -> Self {
        self.clone_entry()
    }
}

/// A service's error as a `Status`, mapped once ([`Status::from_error`]).
fn status_of<E: Into<crate::server::BoxError>>(e: E) -> Status {
    Status::from_error(e.into())
}

/// `f` as a [`RouteFuture`]: as it is if it is one already (a generated server's
/// future is boxed by the server, and boxing it again cost an allocation per call),
/// else boxed once with its errors mapped.
fn boxed_once<F, E>(f: F) -> RouteFuture
where
    F: std::future::Future<Output = Result<ServerReply, E>> + Send + 'static,
    E: Into<crate::server::BoxError>,
{
    let mut f = Some(f);
    if let Some(same) = (&mut f as &mut dyn Any).downcast_mut::<Option<RouteFuture>>() {
        return same.take().expect("set above");
    }
    let f = f.expect("not taken");
    Box::pin(async move { f.await.map_err(status_of) })
}

impl Routes {
    /// Adds `svc` under its name (replacing a service added before under the same
    /// name). Its errors become a `Status` once, by [`Status::from_error`].
    pub(crate) fn add<S: RoutableService>(&mut self, svc: S) {
        let entry: Box<dyn Entry> = Box::new(svc);
        let table = Arc::make_mut(&mut self.table);
        match table.binary_search_by(|(name, _)| name.cmp(&S::NAME)) {
            Ok(i) => table[i].1 = entry,
            Err(i) => table.insert(i, (S::NAME, entry)),
        }
    }

    /// Runs `call` on the service its path names (`UNIMPLEMENTED` without one).
    pub(crate) fn route(&self, call: ServerCall) -> RouteFuture {
        let name = call.service_bytes();
        match self.table.binary_search_by(|(n, _)| n.as_bytes().cmp(name)) {
            Ok(i) => self.table[i].1.dispatch(call),
            Err(_) => {
                // No message, as tonic's router answers; the name goes to the log.
                tracing::debug!(service = %String::from_utf8_lossy(name), "call for a service not served");
                Box::pin(async move { Err(Status::unimplemented("")) })
            }
        }
    }
}

impl Service<ServerCall> for Routes {
    type Response = ServerReply;
    type Error = Status;
    type Future = ResponseFuture<RouteFuture>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ServerCall) -> Self::Future {
        ResponseFuture::inner(self.route(call))
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
        assert_eq!((s.code(), s.message()), (Code::Unimplemented, ""));
    }

    /// A service that is not ready when first asked (then wakes its caller), and
    /// whose readiness fails when `fails`.
    #[derive(Clone)]
    struct Slow {
        asked: Arc<std::sync::atomic::AtomicUsize>,
        fails: bool,
    }

    impl NamedService for Slow {
        const NAME: &'static str = "test.Slow";
    }

    impl Service<ServerCall> for Slow {
        type Response = ServerReply;
        type Error = std::io::Error;
        type Future = Ready<Result<ServerReply, std::io::Error>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            let n = self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n == 0 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if self.fails {
                return Poll::Ready(Err(std::io::Error::other("not ready")));
            }
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: ServerCall) -> Self::Future {
            ready(Err(std::io::Error::other("reached the handler")))
        }
    }

    fn call_to(path: &[u8]) -> ServerCall {
        ServerCall::from_parts(
            Payload::from_vec(path.to_vec()),
            0..path.len(),
            path.len()..path.len(),
            MetadataMap::new(),
            None,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_service_not_ready_at_once_gets_the_call_when_it_is() {
        for (fails, message) in [(false, "reached the handler"), (true, "not ready")] {
            let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut routes = Routes::default();
            routes.add(Slow {
                asked: asked.clone(),
                fails,
            });
            let s = routes.route(call_to(b"/test.Slow/Call")).await.unwrap_err();
            assert_eq!((s.code(), s.message()), (Code::Unknown, message));
            assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
        }
    }

    #[tokio::test]
    async fn services_are_found_by_name_whatever_order_they_were_added_in() {
        let mut routes = Routes::default();
        routes.add(Slow {
            asked: Arc::default(),
            fails: false,
        });
        routes.add(Failing);
        assert_eq!(format!("{routes:?}"), r#"{"test.Failing", "test.Slow"}"#);
        for (path, message) in [
            (&b"/test.Failing/M"[..], "the handler's own error"),
            (b"/test.Slow/M", "reached the handler"),
            (b"/test.Slo/M", ""),
            (b"/test.Slowe/M", ""),
        ] {
            let s = routes.route(call_to(path)).await.unwrap_err();
            assert_eq!(s.message(), message);
        }
    }
}
