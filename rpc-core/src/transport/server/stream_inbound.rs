//! A server streaming call's inbound half as the connection (`rc_peer.rs`) and the
//! call's writer and reader (`rc_stream.rs`) share it: apart, so that both import
//! it and neither imports the other's file for it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::task::Waker;

use tokio::task::AbortHandle;

use crate::status::Status;
use crate::transport::lock;

/// A streaming call's inbound half, shared by the connection and the handler.
#[derive(Default)]
pub(crate) struct InboundShared(pub(super) Mutex<Inner>);

#[derive(Default)]
pub(super) struct Inner {
    pub(super) messages: VecDeque<bytes::Bytes>,
    /// How the client's half ended: `Ok` for its half-close.
    pub(super) end: Option<Result<(), Status>>,
    pub(super) reader: Option<Waker>,
    /// The handler dropped its inbound: later messages are discarded (and their
    /// credit granted back at once, so the client is never stalled by them).
    pub(super) dropped: bool,
    /// The task that ends the call at its deadline: stopped when the call ends first.
    pub(super) deadline_timer: Option<AbortHandle>,
}

impl InboundShared {
    /// Ends the inbound half (unless it already ended).
    pub(crate) fn end(&self, r: Result<(), Status>) {
        let mut st = lock(&self.0);
        if st.end.is_none() {
            st.end = Some(r);
        }
        let w = st.reader.take();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
    }

    /// The call is over here: its inbound ends (unless it already ended), and its
    /// deadline's timer stops.
    pub(super) fn close(&self, r: Result<(), Status>) {
        if let Some(t) = lock(&self.0).deadline_timer.take() {
            t.abort();
        }
        self.end(r);
    }

    /// Messages arrived: `first`, then what `more` yields, queued under one lock
    /// with one wake-up; `false` if the handler no longer reads (the caller
    /// discards them).
    pub(super) fn push(
        &self,
        first: bytes::Bytes,
        more: impl FnMut() -> Option<bytes::Bytes>,
    ) -> Result<(), bytes::Bytes> {
        let mut st = lock(&self.0);
        if st.dropped {
            return Err(first);
        }
        st.messages.push_back(first);
        st.messages.extend(std::iter::from_fn(more));
        let w = st.reader.take();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
        Ok(())
    }
}
