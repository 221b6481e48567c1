//! `NamedService`: the name a service is routed by, carried through tower middleware.

use tower::limit::{ConcurrencyLimit, RateLimit};
use tower::load_shed::LoadShed;
use tower::timeout::Timeout;
use tower::util::{AndThen, Either, MapErr, MapFuture, MapRequest, MapResponse, MapResult, Then};

/// A service with a fully qualified name (`package.Service`), used for routing.
///
/// Generated servers implement it, and so does tower's middleware around a named
/// service, so a `ServiceBuilder` stack is routed by the name of the service at its
/// bottom. A middleware of your own forwards it the same way:
/// `impl<S: NamedService> NamedService for MyLayerService<S> { const NAME: &'static str = S::NAME; }`.
///
/// `Either<A, B>` (what `ServiceBuilder::option_layer` builds) takes the name both
/// sides share; two different names do not compile once it is added:
///
/// ```compile_fail
/// # use rpc_core::server::NamedService;
/// struct A;
/// impl NamedService for A { const NAME: &'static str = "pkg.A"; }
/// struct B;
/// impl NamedService for B { const NAME: &'static str = "pkg.B"; }
/// let _ = <tower::util::Either<A, B> as NamedService>::NAME;
/// ```
pub trait NamedService {
    /// `package.Service`.
    const NAME: &'static str;
}

/// Middleware whose only type parameter is the service it wraps.
macro_rules! forward_name {
    ($($wrapper:ident),* $(,)?) => {
        $(
            impl<S: NamedService> NamedService for $wrapper<S> {
                const NAME: &'static str = S::NAME;
            }
        )*
    };
}

/// `util` adapters: the wrapped service, then the function applied.
macro_rules! forward_name_adapter {
    ($($wrapper:ident),* $(,)?) => {
        $(
            impl<S: NamedService, F> NamedService for $wrapper<S, F> {
                const NAME: &'static str = S::NAME;
            }
        )*
    };
}

// `RateLimit` is not `Clone`, so it cannot be added as it is; it is named for a
// wrapper that shares it (a user's own, or one around the whole stack).
forward_name!(Timeout, ConcurrencyLimit, RateLimit, LoadShed);
forward_name_adapter!(
    AndThen,
    MapErr,
    MapFuture,
    MapRequest,
    MapResponse,
    MapResult,
    Then
);

impl<A: NamedService, B: NamedService> NamedService for Either<A, B> {
    const NAME: &'static str = {
        assert!(
            same(A::NAME, B::NAME),
            "both sides of an `Either` must be services of one name"
        );
        A::NAME
    };
}

/// `a == b`, in a const context.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tower::ServiceBuilder;

    use super::*;
    use crate::status::Status;

    #[derive(Clone)]
    struct Svc;

    impl NamedService for Svc {
        const NAME: &'static str = "pkg.Svc";
    }

    fn name<S: NamedService>(_: &S) -> &'static str {
        S::NAME
    }

    // A runtime because `RateLimit` makes a tokio timer when built.
    #[tokio::test]
    async fn middleware_stacks_take_the_inner_services_name() {
        let stack = ServiceBuilder::new()
            .load_shed()
            .concurrency_limit(4)
            .timeout(Duration::from_secs(1))
            .map_err(|s: Status| s)
            .option_layer(Some(tower::timeout::TimeoutLayer::new(
                Duration::from_secs(2),
            )))
            .service(Svc);
        assert_eq!(name(&stack), "pkg.Svc");
        let rate = ServiceBuilder::new()
            .rate_limit(1, Duration::from_secs(1))
            .service(Svc);
        assert_eq!(name(&rate), "pkg.Svc");
    }

    #[test]
    fn const_string_equality() {
        assert!(same("a.B", "a.B"));
        assert!(!same("a.B", "a.C"));
        assert!(!same("a.B", "a.BC"));
    }
}
