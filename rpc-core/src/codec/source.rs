//! `MessageStreamSource`: a `Stream` of messages as a [`MessageSource`] the
//! transport pulls.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_util::stream::{Map, Stream, StreamExt};
use prost::Message;

use crate::code::Code;
use crate::status::Status;
use crate::stream::MessageSource;

pin_project_lite::pin_project! {
    /// The messages of `S` (items `Result<M, Status>`) as a half-stream for the
    /// transport: an `Ok` item is one message, an `Err` item ends the half-stream with
    /// that status (on the server, the call's final status), and the end of `S` is
    /// end of stream. A message whose encoding is over the encoding limit ends it
    /// with `RESOURCE_EXHAUSTED` instead of being sent.
    ///
    /// The current message stays typed until [`MessageSource::encode_current`]
    /// writes it into the transport's buffer: no allocation per message.
    #[derive(Debug)]
    pub struct MessageStreamSource<S, M> {
        #[pin]
        stream: S,
        current: Option<M>,
        max_encoding: Option<usize>,
        // The code of a message over `max_encoding`: tonic's on each side.
        over_limit: Code,
        done: bool,
    }
}

impl<S, M> MessageStreamSource<S, M>
where
    S: Stream<Item = Result<M, Status>>,
{
    /// A source of the messages of `stream` (a server's replies), each at most
    /// `max_encoding` bytes encoded (`None`: no limit of its own; over it, the call
    /// ends `OUT_OF_RANGE`).
    pub fn new(stream: S, max_encoding: Option<usize>) -> Self {
        MessageStreamSource {
            stream,
            current: None,
            max_encoding,
            over_limit: Code::OutOfRange,
            done: false,
        }
    }
}

/// A client's request stream: messages, each made an `Ok` item by a plain function
/// (no closure to name, nothing allocated).
pub type RequestStream<S, M> = Map<S, fn(M) -> Result<M, Status>>;

impl<S, M> MessageStreamSource<RequestStream<S, M>, M>
where
    S: Stream<Item = M>,
{
    /// A source of a client's request messages (a stream of messages, never errors),
    /// each at most `max_encoding` bytes encoded.
    /// Over the limit, the call ends `INTERNAL`, as tonic's (its HTTP/2 stream is reset).
    pub fn requests(stream: S, max_encoding: Option<usize>) -> Self {
        let ok = stream.map(Ok as fn(M) -> Result<M, Status>);
        MessageStreamSource {
            over_limit: Code::Internal,
            ..MessageStreamSource::new(ok, max_encoding)
        }
    }
}

impl<S, M> MessageSource for MessageStreamSource<S, M>
where
    S: Stream<Item = Result<M, Status>> + Send + 'static,
    M: Message + Send + 'static,
{
    fn poll_message(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<usize, Status>>> {
        let this = self.project();
        // Fused: a stream is never polled again once it ended (many panic if it is).
        if *this.done {
            return Poll::Ready(None);
        }
        let item = ready!(this.stream.poll_next(cx));
        let message = match item {
            Some(Ok(message)) => message,
            Some(Err(status)) => {
                *this.done = true;
                return Poll::Ready(Some(Err(status)));
            }
            None => {
                *this.done = true;
                return Poll::Ready(None);
            }
        };
        let len = message.encoded_len();
        if let Some(limit) = *this.max_encoding {
            if len > limit {
                *this.done = true;
                let status = crate::codegen::encoded_too_large(*this.over_limit, len, limit);
                return Poll::Ready(Some(Err(status)));
            }
        }
        *this.current = Some(message);
        Poll::Ready(Some(Ok(len)))
    }

    fn encode_current(self: Pin<&mut Self>, mut out: &mut [u8]) {
        let message = self
            .project()
            .current
            .take()
            .expect("encode_current without a current message");
        assert_eq!(
            out.len(),
            message.encoded_len(),
            "encode_current given a buffer of the wrong length"
        );
        message.encode_raw(&mut out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;

    fn poll<S: MessageSource + Unpin>(s: &mut S) -> Poll<Option<Result<usize, Status>>> {
        let waker = futures_util::task::noop_waker();
        Pin::new(s).poll_message(&mut Context::from_waker(&waker))
    }

    fn encode<S: MessageSource + Unpin>(s: &mut S, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        Pin::new(s).encode_current(&mut out);
        out
    }

    #[test]
    fn messages_then_end_of_stream_and_nothing_after() {
        let mut s = MessageStreamSource::requests(stream::iter([5u32, 300]), None);
        for want in [5u32, 300] {
            let Poll::Ready(Some(Ok(len))) = poll(&mut s) else {
                panic!("a message is ready")
            };
            let bytes = encode(&mut s, len);
            assert_eq!(u32::decode(&bytes[..]).unwrap(), want);
        }
        assert!(matches!(poll(&mut s), Poll::Ready(None)));
        assert!(matches!(poll(&mut s), Poll::Ready(None)), "fused");
    }

    #[test]
    fn an_error_item_ends_the_stream_with_its_status() {
        let items = [Ok(1u32), Err(Status::aborted("stop")), Ok(2)];
        let mut s = MessageStreamSource::new(stream::iter(items), None);
        let Poll::Ready(Some(Ok(len))) = poll(&mut s) else {
            panic!("first message")
        };
        encode(&mut s, len);
        match poll(&mut s) {
            Poll::Ready(Some(Err(status))) => assert_eq!(status.message(), "stop"),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(poll(&mut s), Poll::Ready(None)),
            "nothing after it"
        );
    }

    #[test]
    fn a_request_over_the_encoding_limit_ends_the_stream_internal_as_on_tonic() {
        let mut s =
            MessageStreamSource::requests(stream::iter([String::from("0123456789")]), Some(4));
        match poll(&mut s) {
            Poll::Ready(Some(Err(status))) => {
                assert_eq!(status.code(), Code::Internal);
                assert!(
                    status.message().contains("the limit is: 4 bytes"),
                    "{status:?}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_reply_over_the_encoding_limit_ends_the_stream_out_of_range_as_on_tonic() {
        let items = [Ok::<_, Status>(String::from("0123456789"))];
        let mut s = MessageStreamSource::new(stream::iter(items), Some(4));
        match poll(&mut s) {
            Poll::Ready(Some(Err(status))) => assert_eq!(status.code(), Code::OutOfRange),
            other => panic!("{other:?}"),
        }
    }
}
