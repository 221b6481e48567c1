//! `Server`: the builder.

use std::time::Duration;

use tokio::sync::Semaphore;
use tower::layer::util::{Identity, Stack};

use super::router::Router;
use super::settings::{ServerSettings, DEFAULT_SERVER_KEEPALIVE};
use super::ud_side::UdStatsHandle;
use crate::handshake::liveness::Keepalive;
use crate::server::RoutableService;
use crate::service::Routes;
use crate::transport::completion::CompletionMode;

/// Builds and runs a server. `L` is the stack of [`Server::layer`]s every call goes
/// through ([`Identity`], none, by default).
#[derive(Debug, Default)]
pub struct Server<L = Identity> {
    pub(super) settings: ServerSettings,
    layer: L,
}

impl Server {
    /// A server with default settings.
    pub fn builder() -> Server {
        Server::default()
    }
}

impl<L> Server<L> {
    /// Wraps the server's routing service ([`Routes`]) in `layer`: every call goes
    /// through it, whatever its service (one it does not know included: the routes
    /// answer it `UNIMPLEMENTED`), as through tonic's `Server::layer`. Layers stack
    /// as in a [`tower::ServiceBuilder`]: the first one added is the outermost, and
    /// a whole `ServiceBuilder`'s layer (`.into_inner()`) is one layer. The stack is
    /// built once when the server starts and each call runs on a clone of it, so
    /// state its layers share across clones (a concurrency limit's semaphore)
    /// applies to all calls of the server.
    ///
    /// The stack must be a [`CallService`](crate::server::CallService): its errors end
    /// a call with the status [`Status::from_error`](crate::Status::from_error) makes of
    /// them. Without layers, calls go straight to their route and pay nothing for
    /// this feature; with layers, each call also clones the boxed stack and boxes its
    /// future.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use rpc_core::service::InterceptorLayer;
    /// use rpc_core::transport::Server;
    /// use rpc_core::{Request, Status};
    ///
    /// fn check_auth(req: Request<()>) -> Result<Request<()>, Status> {
    ///     match req.metadata().get("authorization") {
    ///         Some(_) => Ok(req),
    ///         None => Err(Status::unauthenticated("no token")),
    ///     }
    /// }
    ///
    /// let layer = tower::ServiceBuilder::new()
    ///     .load_shed()
    ///     .layer(InterceptorLayer::new(check_auth))
    ///     .into_inner();
    /// let server = Server::builder().timeout(Duration::from_secs(30)).layer(layer);
    /// # let _ = server;
    /// ```
    pub fn layer<NewLayer>(self, new_layer: NewLayer) -> Server<Stack<NewLayer, L>> {
        Server {
            settings: self.settings,
            layer: Stack::new(new_layer, self.layer),
        }
    }

    /// Caps every handler's time: a call ends `DEADLINE_EXCEEDED` (and its handler is
    /// stopped) once its handler has run this long, or at the call's own deadline if
    /// that comes first. A streaming call is covered whole, counted from its
    /// arrival: its stream ends `DEADLINE_EXCEEDED` (the producer dropped) if it
    /// still runs then, as tonic's timeout covers the response body.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = Some(timeout);
        self
    }

    /// Runs at most `limit` handlers of one connection (an RC connection, or a UD
    /// session) at once; further calls of that connection wait for one to finish
    /// (they are not refused, and their deadlines keep running meanwhile). Other
    /// connections are not held back. A `limit` of 0 counts as 1.
    pub fn concurrency_limit_per_connection(mut self, limit: usize) -> Self {
        self.settings.concurrency_limit = Some(limit.clamp(1, Semaphore::MAX_PERMITS));
        self
    }

    /// With `true`, a call that finds its connection at
    /// [`Server::concurrency_limit_per_connection`] is refused at once,
    /// `RESOURCE_EXHAUSTED` ("Too many active requests for the connection", as
    /// tonic's), instead of waiting for a handler to finish. Off by default.
    pub fn load_shed(mut self, enabled: bool) -> Self {
        self.settings.load_shed = enabled;
        self
    }

    /// Most calls in flight on one connection (default 256): the cap of its credit
    /// window, less the one credit clients keep for CANCEL frames. A connection
    /// starts at one call and its window grows toward this as it is used, out of
    /// the shared receive pool ([`Server::receive_pool_slots`]).
    pub fn credits_per_connection(mut self, n: u32) -> Self {
        self.settings.credits = n.max(1);
        self
    }

    /// Receive slots in the shared pool (SRQ), default 4,112 (32 MiB at the default
    /// slot size): every RC connection's credit window comes out of it. Each
    /// connection holds 2 from its handshake; the pool keeps back 2 for every
    /// further connection [`Server::max_connections`] allows (at most half the
    /// pool), and windows grow into the rest; when it runs low, windows above the
    /// fair share shrink as their connections send. Calls of a connection whose
    /// window is used up wait for a credit, they do not fail. While
    /// `2 * max_connections` is at most half the pool (as by default), a connection
    /// under the limit is never refused for credit; otherwise one that finds fewer
    /// than 2 free is refused at the handshake (`no receive credits left`). The
    /// SRQ holds one receive more than this, which no credit counts: the answer to
    /// a lone frame leaves before that frame's receive is back.
    pub fn receive_pool_slots(mut self, n: u32) -> Self {
        self.settings.pool_slots = n.max(2);
        self
    }

    /// Most RC connections served at once (default 1,024); one more is refused at
    /// the handshake, and its `connect` fails `UNAVAILABLE` naming the limit. The
    /// receive pool keeps the minimal window of each connection still allowed.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.settings.max_connections = n.max(1);
        self
    }

    /// Frame (slot) size in bytes for every connection.
    pub fn slot_size(mut self, bytes: usize) -> Self {
        self.settings.slot_size = bytes.max(crate::engine::MIN_FRAME);
        self
    }

    /// Largest message accepted or sent (beyond: `RESOURCE_EXHAUSTED`).
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.settings.max_message = bytes;
        self
    }

    /// How completions are reaped.
    pub fn completion_mode(mut self, mode: CompletionMode) -> Self {
        self.settings.mode = mode;
        self
    }

    /// Opens this RDMA device instead of the default one.
    pub fn device(mut self, name: impl Into<String>) -> Self {
        self.settings.device = Some(name.into());
        self
    }

    /// Whether a handler starts on the server's completion task and is spawned only
    /// if it has to wait (default), or is spawned as a task at once. Inline start
    /// saves a spawn per call for handlers that answer without waiting; a handler
    /// that computes for long before its first `.await` then delays the other calls,
    /// so turn this off (or use `spawn_blocking`) for such services.
    pub fn inline_handlers(mut self, inline: bool) -> Self {
        self.settings.inline = inline;
        self
    }

    /// Serves on this already opened device (e.g. a soft device whose UD faults a
    /// test sets) instead of opening one.
    pub fn rdma_device(mut self, dev: rpc_transport::Device) -> Self {
        self.settings.rdma_device = Some(dev);
        self
    }

    /// Whether RC connections are accepted (default yes). Without, only UD sessions
    /// are served, and a UD client's call too big for a datagram fails
    /// `RESOURCE_EXHAUSTED` naming the UD payload limit.
    pub fn accept_rc(mut self, yes: bool) -> Self {
        self.settings.ud.accept_rc = yes;
        self
    }

    /// Most UD sessions open at once (default 4096); beyond, a UD handshake is
    /// refused naming the limit. Each session's state is bounded by its window.
    pub fn max_ud_sessions(mut self, n: u32) -> Self {
        self.settings.ud.max_sessions = n;
        self
    }

    /// UD calls a session may have outstanding (default 32): each holds at most this
    /// many duplicate-suppression entries and as many stored replies of one datagram.
    pub fn ud_window(mut self, n: u32) -> Self {
        self.settings.ud.window = n.clamp(1, 1 << 16);
        self
    }

    /// Receives posted on the UD QP's own receive queue (default 1024).
    pub fn ud_receive_slots(mut self, n: u32) -> Self {
        self.settings.ud.recv_slots = n.max(1);
        self
    }

    /// How long a client may take, once connected, to send its hello (default
    /// 10 s); a connection that says nothing by then is closed.
    pub fn handshake_timeout(mut self, t: Duration) -> Self {
        self.settings.handshake_timeout = t;
        self
    }

    /// Connections in handshake (accepted, hello not read yet) at most (default
    /// 1024); one more closes the one that has waited longest, so that silent or
    /// slow peers cannot pile up, while a client that speaks at once is never held
    /// back by them.
    pub fn max_pending_handshakes(mut self, n: usize) -> Self {
        self.settings.max_pending_handshakes = n.max(1);
        self
    }

    /// How long `serve_with_shutdown` lets calls in flight finish after its signal
    /// (default 10 s). Meanwhile the server accepts no connection, every client is
    /// told GOAWAY (its channel starts new calls elsewhere), and calls already sent
    /// run to their answers; what still runs after this is cancelled.
    pub fn shutdown_grace_period(mut self, t: Duration) -> Self {
        self.settings.shutdown_grace = t;
        self
    }

    /// How often the server PINGs each client on its liveness channel (tonic's
    /// name; no HTTP/2 here: the ping travels on the handshake connection). A
    /// client that does not answer within the keepalive timeout is dropped and its
    /// resources reclaimed. Default: every 2 hours (gRPC's); `None` turns it off.
    pub fn http2_keepalive_interval(mut self, interval: Option<Duration>) -> Self {
        let live = &mut self.settings.live;
        live.keepalive = interval.map(|interval| Keepalive {
            interval,
            timeout: live
                .keepalive
                .map_or(DEFAULT_SERVER_KEEPALIVE.timeout, |k| k.timeout),
        });
        self
    }

    /// How long a client may take to answer a keepalive PING (default 20 s).
    pub fn http2_keepalive_timeout(mut self, timeout: Option<Duration>) -> Self {
        let timeout = timeout.unwrap_or(DEFAULT_SERVER_KEEPALIVE.timeout);
        if let Some(k) = &mut self.settings.live.keepalive {
            k.timeout = timeout;
        }
        self
    }

    /// Retires each connection (RC, and UD session) after it has lived this long,
    /// ±10 % so that connections opened together do not retire together (tonic's
    /// name; default none). The server says GOAWAY on it: the client's channel
    /// starts its next calls on a new connection (to this server or, balanced, to
    /// another) and closes the old one once its calls in flight are answered (cut
    /// short only by [`Server::max_connection_age_grace`]). Lets a balanced fleet
    /// rebalance long-lived clients.
    pub fn max_connection_age(mut self, max_connection_age: Duration) -> Self {
        self.settings.live.max_age = Some(max_connection_age);
        self
    }

    /// A tracing span for each call, made by `f` from the call's head as an
    /// `http::Request<()>` (tonic's; here built from the call: `POST`, the
    /// method's path as URI, its metadata as headers with gRPC's `content-type`
    /// and `te`), and entered while the handler (and the layers) run. Built only
    /// when set: a server without it pays nothing per call.
    pub fn trace_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&http::Request<()>) -> tracing::Span + Send + Sync + 'static,
    {
        self.settings.trace = Some(super::trace_fn::TraceFn::new(f));
        self
    }

    /// With [`Server::max_connection_age`]: how long after its GOAWAY an aged
    /// connection may stay open (tonic's name; default: until the client closes it,
    /// which it does once its calls in flight are answered). When it ends, the
    /// server closes the connection and calls still in flight end `UNAVAILABLE` at
    /// the client: a bound on a connection's life for clients with long streams.
    pub fn max_connection_age_grace(mut self, grace: Duration) -> Self {
        self.settings.live.age_grace = Some(grace);
        self
    }

    /// Response bodies longer than `bytes` travel by reference on RC: encoded once
    /// into registered memory and pulled by the client with RDMA Read, instead of in
    /// 8 KiB fragments (default [`crate::transport::DEFAULT_RENDEZVOUS_THRESHOLD`];
    /// `usize::MAX`: never). The server's stream messages longer than `bytes` go
    /// the same way, one frame each. Requests and client stream messages by
    /// reference are read whatever this says. UD keeps one datagram per message.
    /// See `docs/large-messages.md`.
    pub fn rendezvous_threshold(mut self, bytes: usize) -> Self {
        self.settings.rendezvous_threshold = bytes;
        self
    }

    /// Registered memory the server may hold for bodies by reference, all
    /// connections together: at most `bytes`, half for responses lent and half for
    /// requests read, registered as used and reused. A response that finds no room
    /// waits its turn (as does a request's Read); a body larger than its half fails
    /// `RESOURCE_EXHAUSTED` naming the limit. Default
    /// [`crate::transport::DEFAULT_SERVER_POOL_BYTES`] (1 GiB).
    pub fn rendezvous_pool_bytes(mut self, bytes: usize) -> Self {
        self.settings.rendezvous_pool_bytes = bytes;
        self
    }

    /// Reports the occupancy of the server's registered-memory pool to `stats`.
    pub fn rendezvous_stats(mut self, stats: crate::transport::RendezvousStats) -> Self {
        self.settings.rendezvous_stats = Some(stats);
        self
    }

    /// Publishes the UD counters into `handle` while the server runs.
    pub fn ud_stats(mut self, handle: UdStatsHandle) -> Self {
        self.settings.ud_stats = Some(handle);
        self
    }

    /// Adds a service: a generated `<Svc>Server`, or any tower service of the same
    /// request and reply types, such as a [`tower::ServiceBuilder`] stack around
    /// one. Calls are routed by [`NamedService::NAME`](crate::server::NamedService::NAME); each call runs on a clone of
    /// `svc` (no lock), made ready with `poll_ready` first, so middleware that holds
    /// state across clones (a concurrency limit's semaphore) applies to all calls.
    ///
    /// The service's errors end the call with the status that
    /// [`Status::from_error`](crate::Status::from_error) makes of them: a `Status`
    /// unchanged, a `timeout` layer's `Elapsed` as `DEADLINE_EXCEEDED`, a
    /// `load_shed` layer's `Overloaded` as `RESOURCE_EXHAUSTED`, anything else
    /// `UNKNOWN` with its text.
    ///
    /// `NamedService` is implemented for tower's middleware around a named service
    /// (`Timeout`, `ConcurrencyLimit`, `LoadShed`, `RateLimit`, the `util` adapters
    /// such as `MapErr`, and `Either` of two services of one name, which
    /// `ServiceBuilder::option_layer` builds). A middleware of your own implements it
    /// by forwarding to the service it wraps:
    ///
    /// ```
    /// use std::task::{Context, Poll};
    ///
    /// use rpc_core::server::{BoxFuture, NamedService, ServerCall, ServerReply};
    /// use rpc_core::Status;
    /// use tower::Service;
    ///
    /// /// Refuses calls without an `authorization` key.
    /// #[derive(Clone)]
    /// struct RequireAuth<S>(S);
    ///
    /// impl<S: NamedService> NamedService for RequireAuth<S> {
    ///     const NAME: &'static str = S::NAME;
    /// }
    ///
    /// impl<S> Service<ServerCall> for RequireAuth<S>
    /// where
    ///     S: Service<ServerCall, Response = ServerReply, Error = Status>,
    ///     S::Future: Send + 'static,
    /// {
    ///     type Response = ServerReply;
    ///     type Error = Status;
    ///     type Future = BoxFuture<ServerReply>;
    ///
    ///     fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
    ///         self.0.poll_ready(cx)
    ///     }
    ///
    ///     fn call(&mut self, call: ServerCall) -> Self::Future {
    ///         if call.metadata().get("authorization").is_none() {
    ///             return Box::pin(async { Err(Status::unauthenticated("no authorization")) });
    ///         }
    ///         Box::pin(self.0.call(call))
    ///     }
    /// }
    /// ```
    ///
    /// It stacks with tower's own layers:
    /// `add_service(ServiceBuilder::new().layer_fn(RequireAuth).timeout(d).service(svc))`.
    pub fn add_service<S: RoutableService>(self, svc: S) -> Router<L> {
        self.into_router().add_service(svc)
    }

    /// Adds `svc` if it is `Some`; with `None` the service is absent, and its calls
    /// end `UNIMPLEMENTED` (see [`Server::add_service`]).
    pub fn add_optional_service<S: RoutableService>(self, svc: Option<S>) -> Router<L> {
        self.into_router().add_optional_service(svc)
    }

    /// A router serving `routes` (built apart, e.g. with
    /// [`Routes::builder`](crate::service::Routes::builder)), with this server's
    /// settings and layers; the server stays usable, as tonic's.
    pub fn add_routes(&mut self, routes: Routes) -> Router<L>
    where
        L: Clone,
    {
        Router {
            settings: self.settings.clone(),
            routes,
            layer: self.layer.clone(),
        }
    }

    fn into_router(self) -> Router<L> {
        Router {
            settings: self.settings,
            routes: Routes::default(),
            layer: self.layer,
        }
    }
}
