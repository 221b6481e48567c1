//! Running a handler, shared by the RC and UD server paths.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

use futures_util::FutureExt;
use tower::ServiceExt;

use crate::server::{ServerCall, ServerReply};
use crate::status::Status;
use crate::transport::routes::Routes;

/// Runs one call's handler: routed by service name, bounded by the call's deadline,
/// a panic turned into `INTERNAL`.
pub(crate) async fn run_handler(
    routes: &Routes,
    call: Result<ServerCall, Status>,
    timeout: Option<Duration>,
) -> Result<ServerReply, Status> {
    let work = async move {
        let call = call?;
        let svc = routes
            .get(call.service())
            .ok_or_else(|| Status::unimplemented(format!("unknown service {}", call.service())))?;
        svc.oneshot(call).await
    };
    let work = AssertUnwindSafe(work).catch_unwind();
    let result = match timeout {
        Some(t) => match tokio::time::timeout(t, work).await {
            Ok(r) => r,
            Err(_) => Ok(Err(Status::deadline_exceeded(format!(
                "deadline of {t:?} exceeded on the server"
            )))),
        },
        None => work.await,
    };
    result.unwrap_or_else(|_| Err(Status::internal("the handler panicked")))
}

/// With `inline`, runs `fut` on the caller's task until it first waits; `None` if it
/// finished, else the future to spawn (without `inline`: always). Most handlers
/// answer without waiting (an echo, a lookup), and for them this saves a task spawn
/// and a scheduling round: about a tenth of the instructions of a whole call on the
/// soft provider. A pending future is simply
/// polled again by the task it is spawned on, with a waker that counts, so nothing
/// that became ready meanwhile is missed.
pub(crate) fn start_inline<F: Future<Output = ()>>(fut: F, inline: bool) -> Option<Pin<Box<F>>> {
    let mut fut = Box::pin(fut);
    if !inline {
        return Some(fut);
    }
    let mut cx = Context::from_waker(Waker::noop());
    fut.as_mut().poll(&mut cx).is_pending().then_some(fut)
}
