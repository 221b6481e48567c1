//! Interceptors, as `tonic::service::interceptor`: a function that sees every call's
//! metadata and extensions before it is sent (client) or handled (server), may change
//! them, and may end the call with a status instead.

use std::fmt;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::{Layer, Service};

use super::ResponseFuture;
use crate::client::{OutgoingCall, OutgoingStream};
use crate::request::{ConnAddrs, Request};
use crate::server::{NamedService, ServerCall};
use crate::status::Status;
use crate::{Extensions, GrpcMethod, MetadataMap};

/// Sees a call's [`Request<()>`](Request) (its metadata, extensions, timeout and, on
/// the server, the connection's addresses; not its message) and returns it, changed
/// or not, or a status that ends the call: on the client nothing is sent, on the
/// server the handler does not run.
///
/// Any `FnMut(Request<()>) -> Result<Request<()>, Status>` is one. Wrap a client's
/// transport or a generated server in [`InterceptedService`], or give a server
/// [`InterceptorLayer`] through `Server::builder().layer(..)`.
pub trait Interceptor {
    /// Intercepts one call.
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status>;
}

impl<F> Interceptor for F
where
    F: FnMut(Request<()>) -> Result<Request<()>, Status>,
{
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self(request)
    }
}

/// A [`Layer`] wrapping a service in [`InterceptedService`] with a clone of its
/// interceptor: `Server::builder().layer(InterceptorLayer::new(check_auth))`
/// intercepts every call of the server.
#[derive(Debug, Clone, Copy)]
pub struct InterceptorLayer<I> {
    interceptor: I,
}

impl<I> InterceptorLayer<I> {
    /// A layer intercepting with `interceptor`.
    pub fn new(interceptor: I) -> Self {
        InterceptorLayer { interceptor }
    }
}

impl<S, I: Clone> Layer<S> for InterceptorLayer<I> {
    type Service = InterceptedService<S, I>;

    fn layer(&self, inner: S) -> Self::Service {
        InterceptedService::new(inner, self.interceptor.clone())
    }
}

/// A service whose calls go through an [`Interceptor`] first.
///
/// * **Client**: a `Service<OutgoingCall<M>>` around a [`Channel`](crate::transport::Channel)
///   (or any such service). The interceptor gets the call's metadata, extensions
///   and timeout (the request's own: the channel applies its own timeout after
///   the interceptor); the call is sent with what it returns. A refusal ends the
///   call with its status, and nothing is sent.
/// * **Server**: a `Service<ServerCall>` around a generated server (or any such
///   service, or a server's [`Routes`](super::Routes) through [`InterceptorLayer`]).
///   The interceptor gets the call's metadata, extensions, timeout and the
///   connection's addresses ([`Request::remote_addr`]); what it puts in
///   [`Request::extensions_mut`] reaches the handler's request, and so does its
///   metadata. Its timeout is the time the call had left when it arrived; changing
///   it changes nothing (the server armed the deadline on arrival). A refusal
///   answers the call with its status, and the handler does not run. It is routed
///   by the wrapped service's name ([`NamedService`]).
///
/// ```
/// use rpc_core::metadata::AsciiMetadataValue;
/// use rpc_core::service::InterceptedService;
/// use rpc_core::{Request, Status};
///
/// fn add_token(mut req: Request<()>) -> Result<Request<()>, Status> {
///     req.metadata_mut()
///         .insert("authorization", AsciiMetadataValue::from_static("Bearer secret"));
///     Ok(req)
/// }
///
/// fn check_token(req: Request<()>) -> Result<Request<()>, Status> {
///     match req.metadata().get("authorization") {
///         Some(t) if t == "Bearer secret" => Ok(req),
///         _ => Err(Status::unauthenticated("no valid token")),
///     }
/// }
/// # fn wrap<C, S>(channel: C, server: S) {
/// // `GreeterClient::new(InterceptedService::new(channel, add_token))`, and
/// // `Server::builder().add_service(InterceptedService::new(GreeterServer::new(svc), check_token))`.
/// let _client_side = InterceptedService::new(channel, add_token);
/// let _server_side = InterceptedService::new(server, check_token);
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct InterceptedService<S, I> {
    inner: S,
    interceptor: I,
}

impl<S, I> InterceptedService<S, I> {
    /// Wraps `service`, intercepting each call with `interceptor`.
    pub fn new(service: S, interceptor: I) -> Self {
        InterceptedService {
            inner: service,
            interceptor,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug, I> fmt::Debug for InterceptedService<S, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterceptedService")
            .field("inner", &self.inner)
            .field("interceptor", &std::any::type_name::<I>())
            .finish()
    }
}

impl<S: NamedService, I> NamedService for InterceptedService<S, I> {
    const NAME: &'static str = S::NAME;
}

/// The client side: intercepts a call before the transport sends it.
impl<S, I, M> Service<OutgoingCall<M>> for InterceptedService<S, I>
where
    S: Service<OutgoingCall<M>>,
    S::Error: From<Status>,
    I: Interceptor,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: OutgoingCall<M>) -> Self::Future {
        call.extensions.insert(GrpcMethod::of_path(call.path));
        let head = (&mut call.metadata, &mut call.extensions, &mut call.timeout);
        match intercept_head(&mut self.interceptor, head) {
            Ok(()) => ResponseFuture::inner(self.inner.call(call)),
            // The inner service keeps its reservation from `poll_ready` for the next
            // call (or gives it back when dropped).
            Err(status) => ResponseFuture::ended(status),
        }
    }
}

/// Runs a client interceptor on an outgoing call's head (metadata, extensions,
/// timeout), in place: what it returns replaces them; its refusal is the call's.
fn intercept_head<I: Interceptor>(
    interceptor: &mut I,
    (metadata, extensions, timeout): (&mut MetadataMap, &mut Extensions, &mut Option<Duration>),
) -> Result<(), Status> {
    let head = Request::received(
        std::mem::take(metadata),
        std::mem::take(extensions),
        (),
        *timeout,
        ConnAddrs::default(),
    );
    let (m, e, (), t, _) = interceptor.call(head)?.into_all();
    (*metadata, *extensions, *timeout) = (m, e, t);
    Ok(())
}

/// The client side of a streaming call: intercepted once, before the call opens (as
/// tonic's, which sees a streaming call's head only).
impl<S, I> Service<OutgoingStream> for InterceptedService<S, I>
where
    S: Service<OutgoingStream>,
    S::Error: From<Status>,
    I: Interceptor,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: OutgoingStream) -> Self::Future {
        call.extensions.insert(GrpcMethod::of_path(call.path));
        let head = (&mut call.metadata, &mut call.extensions, &mut call.timeout);
        match intercept_head(&mut self.interceptor, head) {
            Ok(()) => ResponseFuture::inner(self.inner.call(call)),
            Err(status) => ResponseFuture::ended(status),
        }
    }
}

/// The server side: intercepts a call before its handler runs.
impl<S, I> Service<ServerCall> for InterceptedService<S, I>
where
    S: Service<ServerCall>,
    S::Error: From<Status>,
    I: Interceptor,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: ServerCall) -> Self::Future {
        match self.interceptor.call(call.take_head()) {
            Ok(head) => {
                call.restore_head(head);
                ResponseFuture::inner(self.inner.call(call))
            }
            Err(status) => ResponseFuture::ended(status),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::{ready, Ready};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tower::ServiceExt;

    use super::*;
    use crate::code::Code;
    use crate::metadata::{AsciiMetadataValue, MetadataMap};
    use crate::payload::Payload;
    use crate::server::{ReplyBody, ServerReply};
    use crate::Response;

    /// What a client-side inner service was asked to send: metadata, timeout, and
    /// the `u32` extension.
    type Call = (MetadataMap, Option<Duration>, Option<u32>);

    /// The calls a client-side inner service was asked to send.
    #[derive(Clone, Default)]
    struct Sent(Arc<Mutex<Vec<Call>>>);

    impl Service<OutgoingCall<u32>> for Sent {
        type Response = ();
        type Error = Status;
        type Future = Ready<Result<(), Status>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, call: OutgoingCall<u32>) -> Self::Future {
            let ext = call.extensions.get::<u32>().copied();
            self.0
                .lock()
                .unwrap()
                .push((call.metadata, call.timeout, ext));
            ready(Ok(()))
        }
    }

    fn outgoing(timeout: Option<Duration>) -> OutgoingCall<u32> {
        let mut req = Request::new(1u32);
        if let Some(t) = timeout {
            req.set_timeout(t);
        }
        req.extensions_mut().insert(5u32);
        OutgoingCall::new("/pkg.S/M", req)
    }

    #[tokio::test]
    async fn a_client_interceptor_changes_what_is_sent_or_ends_the_call() {
        let sent = Sent::default();
        let svc = InterceptedService::new(sent.clone(), |mut req: Request<()>| {
            assert_eq!(req.extensions().get::<u32>(), Some(&5));
            assert_eq!(req.timeout(), Some(Duration::from_secs(9)));
            req.metadata_mut()
                .insert("authorization", AsciiMetadataValue::from_static("Bearer t"));
            req.set_timeout(Duration::from_secs(1));
            req.extensions_mut().insert(6u32);
            Ok(req)
        });
        svc.oneshot(outgoing(Some(Duration::from_secs(9))))
            .await
            .unwrap();
        let (md, timeout, ext) = sent.0.lock().unwrap().pop().unwrap();
        assert_eq!(
            md.get("authorization").unwrap().to_str().unwrap(),
            "Bearer t"
        );
        assert_eq!(timeout, Some(Duration::from_secs(1)));
        assert_eq!(ext, Some(6));

        let refuse = |_: Request<()>| Err(Status::unauthenticated("no"));
        let e = InterceptedService::new(sent.clone(), refuse)
            .oneshot(outgoing(None))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        assert!(sent.0.lock().unwrap().is_empty(), "nothing was sent");
    }

    /// Answers with the `u32` extension of the request it decoded (or 0).
    #[derive(Clone)]
    struct Handler;

    impl Service<ServerCall> for Handler {
        type Response = ServerReply;
        type Error = Status;
        type Future = Ready<Result<ServerReply, Status>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, call: ServerCall) -> Self::Future {
            let req = call.into_request::<u32>();
            ready(req.map(|r| {
                let n = r.extensions().get::<u32>().copied().unwrap_or(0);
                let mut resp = Response::new(ReplyBody::message(n));
                *resp.metadata_mut() = r.metadata().clone();
                resp
            }))
        }
    }

    fn received() -> ServerCall {
        let path = b"/pkg.S/M";
        let mut md = MetadataMap::new();
        md.insert("k", AsciiMetadataValue::from_static("v"));
        ServerCall::from_parts(
            Payload::from_vec(path.to_vec()),
            0..path.len(),
            path.len()..path.len(),
            md,
            None,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_server_interceptor_hands_extensions_to_the_handler_or_refuses() {
        let svc = InterceptedService::new(Handler, |mut req: Request<()>| {
            assert_eq!(req.metadata().get("k").unwrap().to_str().unwrap(), "v");
            req.extensions_mut().insert(42u32);
            Ok(req)
        });
        let reply = svc.oneshot(received()).await.unwrap();
        assert_eq!(reply.metadata().get("k").unwrap().to_str().unwrap(), "v");
        let ReplyBody::Message(m) = reply.get_ref() else {
            panic!("a unary reply")
        };
        assert_eq!(m.encoded_len(), 2, "42 encodes in two bytes");

        let refuse = |_: Request<()>| Err(Status::permission_denied("no"));
        let e = InterceptedService::new(Handler, refuse)
            .oneshot(received())
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
    }
}
