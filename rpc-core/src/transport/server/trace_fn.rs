//! tonic's `Server::trace_fn`: a tracing span per call, made from the call's head
//! as an `http::Request<()>` (what tonic hands it), entered while the handler runs.

use std::fmt;
use std::sync::Arc;

use crate::server::ServerCall;

/// What `Server::trace_fn` takes.
type SpanOf = dyn Fn(&http::Request<()>) -> tracing::Span + Send + Sync;

/// The function `Server::trace_fn` was given.
#[derive(Clone)]
pub(crate) struct TraceFn(Arc<SpanOf>);

impl TraceFn {
    pub(crate) fn new<F>(f: F) -> TraceFn
    where
        F: Fn(&http::Request<()>) -> tracing::Span + Send + Sync + 'static,
    {
        TraceFn(Arc::new(f))
    }

    /// The span of `call`.
    pub(crate) fn span(&self, call: &ServerCall) -> tracing::Span {
        (self.0)(&http_head(call))
    }
}

impl fmt::Debug for TraceFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TraceFn(..)")
    }
}

/// The head a gRPC call has in HTTP/2, as tonic's service sees it: `POST`, the
/// method's path as the URI, HTTP/2, and the call's metadata as headers (with
/// gRPC's `content-type` and `te`, which every gRPC request carries). Built only
/// for a server with a `trace_fn`.
fn http_head(call: &ServerCall) -> http::Request<()> {
    let mut head = http::Request::new(());
    *head.method_mut() = http::Method::POST;
    *head.version_mut() = http::Version::HTTP_2;
    // A call's path was checked to be `/service/method` in ASCII when it arrived.
    if let Ok(uri) = http::Uri::try_from(call.path()) {
        *head.uri_mut() = uri;
    }
    let mut headers = call.metadata().clone().into_headers();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    *head.headers_mut() = headers;
    head
}
