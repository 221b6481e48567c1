//! `Streaming<T>`: the messages a peer streams, decoded one at a time.

use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_util::future::poll_fn;
use futures_util::stream::Stream;
use prost::Message;

use super::shared_buf::SharedBuf;
use crate::metadata::MetadataMap;
use crate::status::Status;
use crate::stream::{BoxInbound, MessageBytes};

/// Which end reads the stream, for the status of a message that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The server reading requests: the caller sent something that is not this
    /// method's input (`INVALID_ARGUMENT`, as for a unary request).
    Server,
    /// The client reading replies (`INTERNAL`, as tonic's).
    Client,
}

/// A stream of messages from the peer, as tonic's `Streaming<T>`: a server handler
/// gets the client's messages as `Request<Streaming<T>>`, a client the server's as
/// `Response<Streaming<T>>`.
///
/// [`Streaming::message`] (or the `Stream` impl) gives each message, then `None` when
/// the peer ended the stream with status OK, or the status that ended it (the
/// server's error, a deadline, a dead connection) as `Err`, after which nothing
/// follows. A message over the decoding limit, or one that does not decode, is an
/// `Err` too, and ends the call: the rest of the stream is refused.
///
/// Reading is what lets the peer send more (each message read grants room for
/// another), so a slow reader slows only its own stream. Dropping a client's
/// `Streaming` before the end cancels the call.
pub struct Streaming<T> {
    /// `None` once the stream ended (the transport's half is then released).
    inbound: Option<BoxInbound>,
    max_decoding: Option<usize>,
    side: Side,
    /// The trailers of a stream that ended OK (client side).
    trailers: Option<MetadataMap>,
    _message: PhantomData<fn() -> T>,
}

impl<T> Streaming<T> {
    /// Decodes the messages of `inbound`, each at most `max_decoding` bytes encoded.
    pub(crate) fn new(inbound: BoxInbound, max_decoding: Option<usize>, side: Side) -> Self {
        Streaming {
            inbound: Some(inbound),
            max_decoding,
            side,
            trailers: None,
            _message: PhantomData,
        }
    }
}

impl<T: Message + Default> Streaming<T> {
    /// The next message: `Ok(Some(m))`, `Ok(None)` once the stream ended with status
    /// OK, or the status that ended it.
    pub async fn message(&mut self) -> Result<Option<T>, Status> {
        match poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await {
            Some(Ok(m)) => Ok(Some(m)),
            Some(Err(status)) => Err(status),
            None => Ok(None),
        }
    }

    /// The trailing metadata the server ended the call with, after `grpc-status: 0`
    /// as tonic's (a client's stream only). Messages not yet read
    /// are read and dropped first (none, after [`Streaming::message`] gave `None`);
    /// a call that ended with an error status gives that status. `None` on a
    /// server's stream of requests, which has no trailers.
    pub async fn trailers(&mut self) -> Result<Option<MetadataMap>, Status> {
        while self.message().await?.is_some() {}
        Ok(self.trailers.take())
    }
}

/// Decodes one message of at most `max_decoding` bytes, read on `side`.
fn decode<T: Message + Default>(
    m: MessageBytes<'_>,
    max_decoding: Option<usize>,
    side: Side,
) -> Result<T, Status> {
    let len = match &m {
        MessageBytes::Payload(p) => p.as_slice().len(),
        MessageBytes::Shared(_, range) => range.len(),
    };
    if let Some(limit) = max_decoding {
        if len > limit {
            return Err(crate::codegen::decoded_too_large(len, limit));
        }
    }
    let decoded = match m {
        MessageBytes::Payload(p) => p.decode(0..len),
        MessageBytes::Shared(all, range) => T::decode(SharedBuf::new(all, range)),
    };
    decoded.map_err(|e| match side {
        Side::Server => Status::invalid_argument(format!("failed to decode request message: {e}")),
        Side::Client => Status::internal(format!("failed to decode response message: {e}")),
    })
}

impl<T: Message + Default> Stream for Streaming<T> {
    type Item = Result<T, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(inbound) = this.inbound.as_mut() else {
            return Poll::Ready(None);
        };
        let (max, side) = (this.max_decoding, this.side);
        let mut decoded = None;
        let read = &mut |m: MessageBytes<'_>| decoded = Some(decode::<T>(m, max, side));
        let item = match ready!(inbound.as_mut().poll_message_in_place(cx, read)) {
            Some(Ok(())) => match decoded {
                Some(Ok(message)) => return Poll::Ready(Some(Ok(message))),
                // Refused: dropping the inbound half tells the transport this side
                // wants no more of the call.
                Some(Err(status)) => Some(Err(status)),
                None => Some(Err(Status::internal("the transport gave no message"))),
            },
            Some(Err(status)) => Some(Err(status)),
            None => {
                this.trailers = inbound
                    .as_mut()
                    .trailers()
                    .map(MetadataMap::into_ok_trailers);
                None
            }
        };
        this.inbound = None;
        Poll::Ready(item)
    }
}

impl<T> fmt::Debug for Streaming<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Streaming")
            .field("ended", &self.inbound.is_none())
            .field("max_decoding", &self.max_decoding)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::AsciiMetadataValue;
    use crate::stream::InboundMessages;
    use crate::Payload;
    use std::collections::VecDeque;

    /// Messages already received, then an end.
    struct Received {
        items: VecDeque<Result<Payload, Status>>,
        trailers: Option<MetadataMap>,
    }

    impl InboundMessages for Received {
        fn poll_message(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Payload, Status>>> {
            Poll::Ready(self.items.pop_front())
        }

        fn trailers(mut self: Pin<&mut Self>) -> Option<MetadataMap> {
            self.trailers.take()
        }
    }

    fn streaming(
        items: Vec<Result<Payload, Status>>,
        trailers: Option<MetadataMap>,
        max: Option<usize>,
    ) -> Streaming<u32> {
        let inbound = Received {
            items: items.into(),
            trailers,
        };
        Streaming::new(Box::pin(inbound), max, Side::Client)
    }

    fn encoded(v: u32) -> Result<Payload, Status> {
        Ok(Payload::from_vec(v.encode_to_vec()))
    }

    #[test]
    fn a_stream_is_send_and_sync_as_tonic_s() {
        // A `&Streaming` held across an await in a spawned task needs both.
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Streaming<u32>>();
    }

    #[tokio::test]
    async fn messages_then_none_then_the_trailers() {
        let mut md = MetadataMap::new();
        md.insert("done", AsciiMetadataValue::from_static("yes"));
        let mut s = streaming(vec![encoded(1), encoded(2)], Some(md), None);
        assert_eq!(s.message().await.unwrap(), Some(1));
        // `trailers` reads (and drops) what was not read yet.
        let trailers = s.trailers().await.unwrap().expect("trailers");
        assert_eq!(trailers.get("done").unwrap().to_str().unwrap(), "yes");
        let keys: Vec<_> = trailers.keys().map(|k| format!("{k:?}")).collect();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(
            keys[0].contains("grpc-status"),
            "first, as tonic's: {keys:?}"
        );
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
        assert_eq!(s.message().await.unwrap(), None, "ended");
    }

    #[tokio::test]
    async fn an_error_status_ends_the_stream_after_the_messages_before_it() {
        let items = vec![encoded(7), Err(Status::aborted("gone")), encoded(8)];
        let mut s = streaming(items, None, None);
        assert_eq!(s.message().await.unwrap(), Some(7));
        assert_eq!(s.message().await.unwrap_err().message(), "gone");
        assert_eq!(s.message().await.unwrap(), None, "nothing after the status");
    }

    #[tokio::test]
    async fn a_message_over_the_decoding_limit_is_refused_and_ends_the_stream() {
        let items = vec![encoded(1), encoded(u32::MAX), encoded(2)];
        let mut s = streaming(items, None, Some(2));
        assert_eq!(s.message().await.unwrap(), Some(1));
        let err = s.message().await.unwrap_err();
        assert_eq!(err.code(), crate::Code::OutOfRange);
        assert!(err.message().contains("found 6 bytes"), "{err:?}");
        assert_eq!(s.message().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_message_that_does_not_decode_is_internal_on_the_client() {
        let items = vec![Ok(Payload::from_vec(vec![0xff]))];
        let err = streaming(items, None, None).message().await.unwrap_err();
        assert_eq!(err.code(), crate::Code::Internal, "{err:?}");
    }
}
