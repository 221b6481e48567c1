//! `WatchStream`: the replies of one `Watch` call.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use rpc_core::Status;
use tokio::sync::watch;

use crate::pb::HealthCheckResponse;
use crate::ServingStatus;

type Replies = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

/// The replies of a `Watch` call: the service's status when the call came, then
/// each change. Changes made faster than the client reads are coalesced: it sees
/// the latest. Ends when the service's status is cleared.
pub struct WatchStream {
    replies: Replies,
}

impl WatchStream {
    pub(crate) fn new(mut statuses: watch::Receiver<ServingStatus>) -> Self {
        // The current status counts as unseen, so the first poll sends it.
        statuses.mark_changed();
        let replies = futures_util::stream::unfold(statuses, |mut statuses| async move {
            // Err: the reporter dropped the sender (the service was cleared).
            statuses.changed().await.ok()?;
            let status = *statuses.borrow_and_update();
            Some((Ok(HealthCheckResponse::from(status)), statuses))
        });
        WatchStream {
            replies: Box::pin(replies),
        }
    }
}

impl Stream for WatchStream {
    type Item = Result<HealthCheckResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.replies.as_mut().poll_next(cx)
    }
}

impl fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchStream").finish_non_exhaustive()
    }
}
