//! Running a handler, shared by the RC and UD server paths.

use std::any::TypeId;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::{Semaphore, SemaphorePermit};
use tower::util::BoxCloneSyncService;
use tower::ServiceExt;

use super::call_box::CallBox;
use super::trace_fn::TraceFn;
use crate::server::{CallService, ReplyBody, ServerCall, ServerReply};
use crate::service::{Route, Routes};
use crate::status::Status;

/// What every call of a server runs on: the routes, the stack of layers around them
/// (if any), and the server's cap on handlers' time.
pub(crate) struct Served {
    routes: Routes,
    /// The layers of `Server::layer` around `routes`, boxed once; `None` without
    /// layers, so that calls then go to their route as directly as before layers
    /// existed (no boxed stack to clone, no boxed future per call).
    stack: Option<Route>,
    timeout: Option<Duration>,
    /// `Server::load_shed`: a call finding its connection's limit reached is
    /// refused instead of waiting.
    load_shed: bool,
    /// `Server::trace_fn`: a span per call, entered while its handler runs.
    trace: Option<TraceFn>,
}

impl Served {
    /// `stack` is the server's layers applied to `routes`.
    pub(crate) fn new<T: CallService>(
        routes: Routes,
        stack: T,
        timeout: Option<Duration>,
        load_shed: bool,
        trace: Option<TraceFn>,
    ) -> Served {
        // No layer (tower's `Identity`) gives back the routes themselves.
        let stack = (TypeId::of::<T>() != TypeId::of::<Routes>()).then(|| {
            BoxCloneSyncService::new(stack.map_err(|e: T::Error| Status::from_error(e.into())))
        });
        Served {
            routes,
            stack,
            timeout,
            load_shed,
            trace,
        }
    }
}

impl Served {
    /// The server's cap on a call's time (`Server::timeout`).
    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

/// Runs one call's handler: through the server's layers (if any) to its route,
/// bounded by the call's deadline and by the server's timeout (counted from the
/// handler's start), a panic turned into `INTERNAL`.
///
/// A server without layers or `trace_fn` (the common case) keeps only the route's
/// boxed future (and the timer, with a deadline) across its waits. Everything the
/// general path holds (the call until its layers take it, a span) made every call's
/// future about four times larger, and a call's future is moved into its box and
/// through its wrappers whole, several times per call.
pub(crate) async fn run_handler(
    served: &Served,
    call: Result<ServerCall, Status>,
    timeout: Option<Duration>,
) -> Result<ServerReply, Status> {
    let timeout = match (timeout, served.timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let call = call?;
    if served.stack.is_some() || served.trace.is_some() {
        return Box::pin(run_layered(served, call, timeout)).await;
    }
    // The route's `call` runs here (a generated server decodes the request in it):
    // a panic in it is the handler's too.
    let Ok(route) = std::panic::catch_unwind(AssertUnwindSafe(|| served.routes.route(call))) else {
        return Err(panicked());
    };
    bounded(AssertUnwindSafe(route).catch_unwind(), timeout).await
}

/// [`run_handler`] through the server's layers, or in its `trace_fn`'s span.
async fn run_layered(
    served: &Served,
    call: ServerCall,
    timeout: Option<Duration>,
) -> Result<ServerReply, Status> {
    let work = async move {
        let span = served.trace.as_ref().map(|t| t.span(&call));
        let route = async {
            match &served.stack {
                None => served.routes.route(call).await,
                Some(stack) => stack.clone().oneshot(call).await,
            }
        };
        match span {
            None => route.await,
            Some(span) => tracing::Instrument::instrument(route, span).await,
        }
    };
    bounded(AssertUnwindSafe(work).catch_unwind(), timeout).await
}

/// `work` (a handler with its panics caught) within `timeout`.
async fn bounded<F>(work: F, timeout: Option<Duration>) -> Result<ServerReply, Status>
where
    F: Future<Output = std::thread::Result<Result<ServerReply, Status>>>,
{
    let result = match timeout {
        Some(t) => match tokio::time::timeout(t, work).await {
            Ok(r) => r,
            Err(_) => Ok(Err(Status::deadline_exceeded(format!(
                "deadline of {t:?} exceeded on the server"
            )))),
        },
        None => work.await,
    };
    result.unwrap_or_else(|_| Err(panicked()))
}

fn panicked() -> Status {
    Status::internal("the handler panicked")
}

/// [`run_handler`] after a permit of the connection's concurrency `limit`, waited
/// for within the call's deadline (`timeout` counts from the call's arrival).
/// Callers box this future, so that calls of servers without a limit do not carry
/// its room.
pub(crate) async fn run_limited(
    served: &Served,
    call: Result<ServerCall, Status>,
    timeout: Option<Duration>,
    limit: &Semaphore,
) -> Result<ServerReply, Status> {
    // A call that is not one (malformed) has no handler to wait for.
    let call = call?;
    let (_permit, timeout) = match limit.try_acquire() {
        Ok(permit) => (permit, timeout),
        Err(_) if served.load_shed => return Err(Status::shed()),
        Err(_) => wait_for_permit(limit, timeout).await?,
    };
    run_handler(served, Ok(call), timeout).await
}

/// Waits for a permit of `limit` within the call's deadline; the time left after.
async fn wait_for_permit(
    limit: &Semaphore,
    timeout: Option<Duration>,
) -> Result<(SemaphorePermit<'_>, Option<Duration>), Status> {
    let closed = |_| Status::internal("the connection's call limit was closed");
    let Some(t) = timeout else {
        return Ok((limit.acquire().await.map_err(closed)?, None));
    };
    let start = Instant::now();
    match tokio::time::timeout(t, limit.acquire()).await {
        Ok(permit) => Ok((permit.map_err(closed)?, Some(t.saturating_sub(start.elapsed())))),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "deadline of {t:?} exceeded on the server, waiting for one of the connection's calls to finish"
        ))),
    }
}

/// With `inline`, runs `fut` on the caller's task until it first waits; `None` if it
/// finished, else the future to spawn (without `inline`: always). Most handlers
/// answer without waiting (an echo, a lookup), and for them this saves a task spawn
/// and a scheduling round: about a tenth of the instructions of a whole call on the
/// soft provider; the box of one that finished takes the thread's next call
/// ([`CallBox`]). A pending future is simply
/// polled again by the task it is spawned on, with a waker that counts, so nothing
/// that became ready meanwhile is missed.
pub(crate) fn start_inline<F: Future<Output = ()> + 'static>(
    fut: F,
    inline: bool,
) -> Option<CallBox<F>> {
    let mut fut = CallBox::new(fut);
    if !inline {
        return Some(fut);
    }
    let mut cx = Context::from_waker(Waker::noop());
    if Pin::new(&mut fut).poll(&mut cx).is_pending() {
        return Some(fut);
    }
    fut.recycle();
    None
}

/// Waits once: a call started inline (`start_inline`) continues on a task of its
/// own from here, off the receive loop; a spawned one continues at once (its waker
/// is woken, so the task goes back in the run queue).
pub(crate) async fn leave_inline() {
    let mut waited = false;
    std::future::poll_fn(|cx| {
        if waited {
            return std::task::Poll::Ready(());
        }
        waited = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

/// A reply split for a one-frame answer (a unary call). A streaming reply on a path
/// that cannot stream (UD, or a unary call on RC: only a streaming call's answer
/// can carry a stream) is `UNIMPLEMENTED`, saying so.
pub(crate) fn unary_parts(
    result: Result<ServerReply, Status>,
) -> Result<(crate::MetadataMap, crate::server::BoxMessage), Status> {
    let (metadata, body, _) = result?.into_parts();
    match body {
        ReplyBody::Message(m) => Ok((metadata, m)),
        ReplyBody::Stream(_) => Err(Status::unimplemented(
            "a streaming reply cannot travel on this transport",
        )),
    }
}
