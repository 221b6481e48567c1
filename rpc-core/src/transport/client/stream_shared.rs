//! A streaming call's state as its caller, reader, writer and the connection's
//! driver share it: apart from the connection (`rc.rs`) and the call's tasks
//! (`stream.rs`), which both import it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::task::Waker;

use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use crate::engine::{Arrived, StreamEvent};
use crate::metadata::MetadataMap;
use crate::status::Status;
use crate::transport::lock;

/// A streaming call as its caller, reader and writer share it.
#[derive(Default)]
pub(crate) struct StreamShared(pub(super) Mutex<Inner>);

#[derive(Default)]
pub(super) struct Inner {
    /// Resolves the caller's future with the headers (or the status that ended the
    /// call before them).
    pub(super) headers: Option<oneshot::Sender<Result<MetadataMap, Status>>>,
    /// Messages as they arrived together (a batch is one entry).
    pub(super) messages: VecDeque<Arrived>,
    /// How the call ended, once it did (the reader takes it after the messages).
    pub(super) end: Option<Result<MetadataMap, Status>>,
    pub(super) reader: Option<Waker>,
    pub(super) writer: Option<Waker>,
    /// The task pulling the request messages: stopped when the call ends, which
    /// drops the caller's source (its producer sees that).
    pub(super) writer_task: Option<AbortHandle>,
}

impl StreamShared {
    /// Messages for this call (under the connection's lock): `first`, then what
    /// `more` yields, queued under one lock with one wake-up.
    pub(crate) fn on_messages(&self, first: Arrived, more: impl FnMut() -> Option<Arrived>) {
        let mut st = lock(&self.0);
        st.messages.push_back(first);
        st.messages.extend(std::iter::from_fn(more));
        let w = st.reader.take();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
    }

    /// An event of the engine for this call (under the connection's lock).
    pub(crate) fn on_event(&self, ev: StreamEvent) {
        let mut st = lock(&self.0);
        let wake = match ev {
            StreamEvent::Headers(md) => {
                if let Some(tx) = st.headers.take() {
                    let _ = tx.send(Ok(md));
                }
                None
            }
            StreamEvent::Message(m) => {
                st.messages.push_back(m);
                st.reader.take()
            }
            StreamEvent::Writable => st.writer.take(),
            StreamEvent::End(r) => {
                if let Some(tx) = st.headers.take() {
                    // Ended before its headers: the caller's future fails.
                    let _ = tx
                        .send(Err(r.clone().err().unwrap_or_else(|| {
                            Status::internal("the call ended without headers")
                        })));
                }
                st.end = Some(r);
                if let Some(t) = st.writer_task.take() {
                    t.abort();
                }
                if let Some(w) = st.writer.take() {
                    w.wake();
                }
                st.reader.take()
            }
        };
        drop(st);
        if let Some(w) = wake {
            w.wake();
        }
    }
}
