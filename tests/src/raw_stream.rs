//! Streaming calls written against the transport's raw seam (no typed API): small
//! [`MessageSource`]s, a reader of [`InboundMessages`], and `test.Stream`, a
//! hand-written streaming service. Every handler reports what it saw to a
//! per-test [`Witness`] (its producer dropped, how its inbound ended), so that
//! tests wait on those events instead of sleeping.

use std::collections::HashMap;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use prost::Message;
use rpc_core::client::{IncomingStream, OutgoingStream};
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::stream::{BoxInbound, BoxMessageSource, MessageSource};
use rpc_core::transport::{Channel, Server};
use rpc_core::{Code, Extensions, MetadataMap, Response, Status};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tower::{Service, ServiceExt};

use crate::Echo;

/// What a handler of a test saw, as it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The handler's producer was dropped before its end (the call was cancelled).
    ProducerDropped,
    /// The client's messages ended: `Ok` with how many there were, or the status code.
    InboundEnded(Result<u64, Code>),
    /// The handler took this many messages so far.
    Took(u64),
    /// A source the client gave was polled for its `n`th message.
    Polled(u64),
}

static WITNESSES: Mutex<Option<HashMap<u64, mpsc::UnboundedSender<Seen>>>> = Mutex::new(None);

/// How many messages the client's sources of each tag produced so far, for a
/// handler that waits on it (`Ignore`).
static POLLED: Mutex<Option<HashMap<u64, std::sync::Arc<watch::Sender<u64>>>>> = Mutex::new(None);

fn polled(tag: u64) -> std::sync::Arc<watch::Sender<u64>> {
    POLLED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .entry(tag)
        .or_insert_with(|| std::sync::Arc::new(watch::Sender::new(0)))
        .clone()
}

/// A receiver of what the handlers of calls tagged `tag` saw. Tags are per test.
pub struct Witness(mpsc::UnboundedReceiver<Seen>);

impl Witness {
    /// Registers `tag`.
    pub fn new(tag: u64) -> Witness {
        let (tx, rx) = mpsc::unbounded_channel();
        WITNESSES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(tag, tx);
        Witness(rx)
    }

    /// Waits (10 s at most: a failure, not a synchronisation) for an event
    /// matching `want`, skipping others; panics naming `what` if none comes.
    pub async fn wait_for(&mut self, what: &str, want: impl Fn(&Seen) -> bool) -> Seen {
        let found = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(s) = self.0.recv().await {
                if want(&s) {
                    return Some(s);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(s)) => s,
            _ => panic!("never saw: {what}"),
        }
    }

    /// Waits (10 s at most) until every event of `want` was seen, in any order.
    pub async fn wait_for_all(&mut self, what: &str, mut want: Vec<Seen>) {
        let r = tokio::time::timeout(Duration::from_secs(10), async {
            while !want.is_empty() {
                let s = self.0.recv().await?;
                if let Some(i) = want.iter().position(|w| *w == s) {
                    want.swap_remove(i);
                }
            }
            Some(())
        })
        .await;
        assert!(matches!(r, Ok(Some(()))), "never saw all of: {what}");
    }

    /// Events seen so far, without waiting.
    pub fn drain(&mut self) -> Vec<Seen> {
        let mut v = Vec::new();
        while let Ok(s) = self.0.try_recv() {
            v.push(s);
        }
        v
    }
}

/// Reports `seen` to the witness of `tag` (if a test registered one).
pub fn report(tag: u64, seen: Seen) {
    if let Seen::Polled(n) = seen {
        polled(tag).send_replace(n);
    }
    if let Some(tx) = WITNESSES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&tag))
    {
        let _ = tx.send(seen);
    }
}

/// A source of [`Echo`]s fed through a channel: the test (or a handler) sends, the
/// transport pulls. Reports [`Seen::ProducerDropped`] for `tag` if dropped before
/// its end, and [`Seen::Polled`] each time it hands out a message.
pub struct ChanSource {
    rx: mpsc::Receiver<Result<Echo, Status>>,
    current: Option<Echo>,
    ended: bool,
    tag: u64,
    polled: u64,
}

impl ChanSource {
    /// A source and its sender; `cap` messages may wait in the channel.
    pub fn new(tag: u64, cap: usize) -> (mpsc::Sender<Result<Echo, Status>>, ChanSource) {
        let (tx, rx) = mpsc::channel(cap);
        let s = ChanSource {
            rx,
            current: None,
            ended: false,
            tag,
            polled: 0,
        };
        (tx, s)
    }

    /// Boxed for a call.
    pub fn boxed(self) -> BoxMessageSource {
        Box::pin(self)
    }
}

impl MessageSource for ChanSource {
    fn poll_message(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<usize, Status>>> {
        match self.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(s))) => {
                self.ended = true;
                Poll::Ready(Some(Err(s)))
            }
            Poll::Ready(Some(Ok(m))) => {
                self.polled += 1;
                report(self.tag, Seen::Polled(self.polled));
                let len = m.encoded_len();
                self.current = Some(m);
                Poll::Ready(Some(Ok(len)))
            }
        }
    }

    fn encode_current(mut self: Pin<&mut Self>, mut out: &mut [u8]) {
        let m = self.current.take().expect("a current message");
        m.encode_raw(&mut out);
    }
}

impl Drop for ChanSource {
    fn drop(&mut self) {
        if !self.ended {
            report(self.tag, Seen::ProducerDropped);
        }
    }
}

/// A source that produces `n` messages of `len` bytes on demand (no channel),
/// then ends (`Ok`) or fails with `end`.
pub struct CountSource {
    next: u64,
    n: u64,
    len: usize,
    end: Option<Status>,
    current: Option<Echo>,
    tag: u64,
    done: bool,
}

impl CountSource {
    /// `n` messages of `len` bytes (ids `0..n`), then `end`.
    pub fn boxed(tag: u64, n: u64, len: usize, end: Option<Status>) -> BoxMessageSource {
        Box::pin(CountSource {
            next: 0,
            n,
            len,
            end,
            current: None,
            tag,
            done: false,
        })
    }
}

impl MessageSource for CountSource {
    fn poll_message(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<usize, Status>>> {
        if self.next == self.n {
            self.done = true;
            return Poll::Ready(self.end.take().map(Err));
        }
        let m = Echo {
            id: self.next,
            data: vec![(self.next % 251) as u8; self.len],
        };
        self.next += 1;
        report(self.tag, Seen::Polled(self.next));
        let len = m.encoded_len();
        self.current = Some(m);
        Poll::Ready(Some(Ok(len)))
    }

    fn encode_current(mut self: Pin<&mut Self>, mut out: &mut [u8]) {
        let m = self.current.take().expect("a current message");
        m.encode_raw(&mut out);
    }
}

impl Drop for CountSource {
    fn drop(&mut self) {
        if !self.done {
            report(self.tag, Seen::ProducerDropped);
        }
    }
}

/// The next message of an inbound half, decoded.
pub async fn next(inbound: &mut BoxInbound) -> Option<Result<Echo, Status>> {
    let p = poll_fn(|cx| inbound.as_mut().poll_message(cx)).await?;
    Some(p.and_then(|p| {
        Echo::decode(p.as_slice()).map_err(|e| Status::internal(format!("bad message: {e}")))
    }))
}

/// Every message until the end, and how it ended.
pub async fn read_all(inbound: &mut BoxInbound) -> (Vec<Echo>, Result<(), Status>) {
    let mut v = Vec::new();
    loop {
        match next(inbound).await {
            None => return (v, Ok(())),
            Some(Ok(m)) => v.push(m),
            Some(Err(s)) => return (v, Err(s)),
        }
    }
}

/// Opens a streaming call of `test.Stream/{method}` tagged `tag` (what its handler
/// saw is reported under it) with parameters `args`, sending `messages`.
pub async fn open(
    ch: &mut Channel,
    method: &str,
    tag: u64,
    args: &[u64],
    timeout: Option<Duration>,
    messages: BoxMessageSource,
) -> Result<IncomingStream, Status> {
    let path = stream_path(method);
    let mut metadata = MetadataMap::new();
    metadata.insert("x-tag", tag.to_string().parse().expect("ascii"));
    let args: Vec<String> = args.iter().map(u64::to_string).collect();
    metadata.insert("x-args", args.join(",").parse().expect("ascii"));
    ServiceExt::<OutgoingStream>::ready(ch).await?;
    ch.call(OutgoingStream {
        path,
        metadata,
        timeout,
        extensions: Extensions::new(),
        messages,
    })
    .await
}

/// Full path of a method of [`StreamService`].
pub fn stream_path(method: &str) -> &'static str {
    match method {
        "Count" => "/test.Stream/Count",
        "Sum" => "/test.Stream/Sum",
        "Bidi" => "/test.Stream/Bidi",
        "Endless" => "/test.Stream/Endless",
        "Hold" => "/test.Stream/Hold",
        "Ignore" => "/test.Stream/Ignore",
        "Fail" => "/test.Stream/Fail",
        "Block" => "/test.Stream/Block",
        _ => panic!("unknown stream method {method}"),
    }
}

/// `test.Stream`. Each call's metadata says what to do: `x-tag`, the tag events are
/// reported under, and `x-args`, its parameters (see [`open`]). No handler waits
/// for a request message before it answers (the call's future resolves then).
/// * `Count`: `args = [n, len, fail]`: `n` messages of `len` bytes, then OK, or,
///   if `fail` is 1, the status `ABORTED "failed after n"`.
/// * `Sum`: reads every request message, then answers one message: `id` = how many,
///   `data` = the total of their lengths as 8 big-endian bytes (client-streaming).
/// * `Bidi`: answers each request message with itself, until the client ends.
/// * `Endless`: messages of `args[0]` KiB until cancelled (its producer's drop is
///   reported); the first of `args[1]` KiB instead when that is not 0.
/// * `Hold`: reads the client's messages and never answers one: a stream that
///   stays open until the call ends (its inbound's end is reported when it comes).
/// * `Ignore`: drops its inbound at once and answers one message (`id` = the tag)
///   once the client's source of the same tag has produced `args[0]` messages
///   (an event, not a delay: however slow the fabric, the client has sent them all);
///   the messages it gets meanwhile are discarded.
/// * `Block`: never returns (a handler blocked inside), holding its inbound unread.
/// * `Fail`: fails before answering: `FAILED_PRECONDITION` (trailers-only).
#[derive(Debug, Clone, Default)]
pub struct StreamService;

impl NamedService for StreamService {
    const NAME: &'static str = "test.Stream";
}

fn msg(id: u64, data: Vec<u8>) -> Echo {
    Echo { id, data }
}

impl tower::Service<ServerCall> for StreamService {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut call: ServerCall) -> Self::Future {
        Box::pin(async move {
            let method = call.method().to_string();
            let mut inbound = call
                .take_inbound()
                .ok_or_else(|| Status::internal("not a streaming call"))?;
            let stream = |s: BoxMessageSource| Ok(Response::new(ReplyBody::Stream(s)));
            let md = call.metadata();
            let tag: u64 = md
                .get("x-tag")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let args: Vec<u64> = md
                .get("x-args")
                .and_then(|v| v.to_str().ok())
                .map(|v| v.split(',').filter_map(|a| a.parse().ok()).collect())
                .unwrap_or_default();
            let arg = |i: usize| args.get(i).copied().unwrap_or(0);
            if method == "Fail" {
                return Err(Status::failed_precondition("refused before answering"));
            }
            if method == "Sum" {
                let mut count = 0u64;
                let mut total = 0u64;
                let end = loop {
                    match next(&mut inbound).await {
                        None => break Ok(count),
                        Some(Ok(m)) => {
                            count += 1;
                            total += m.data.len() as u64;
                            report(tag, Seen::Took(count));
                        }
                        Some(Err(s)) => break Err(s.code()),
                    }
                };
                report(tag, Seen::InboundEnded(end));
                end.map_err(|c| Status::new(c, "inbound failed"))?;
                return Ok(Response::new(ReplyBody::message(msg(
                    count,
                    total.to_be_bytes().to_vec(),
                ))));
            }
            match method.as_str() {
                "Count" => {
                    let end =
                        (arg(2) == 1).then(|| Status::aborted(format!("failed after {}", arg(0))));
                    stream(CountSource::boxed(tag, arg(0), arg(1) as usize, end))
                }
                "Bidi" => {
                    let (tx, src) = ChanSource::new(tag, 1);
                    tokio::spawn(async move {
                        let mut n = 0;
                        let end = loop {
                            match next(&mut inbound).await {
                                None => break Ok(n),
                                Some(Ok(m)) => {
                                    n += 1;
                                    if tx.send(Ok(m)).await.is_err() {
                                        break Err(Code::Cancelled);
                                    }
                                }
                                Some(Err(s)) => break Err(s.code()),
                            }
                        };
                        report(tag, Seen::InboundEnded(end));
                    });
                    stream(src.boxed())
                }
                "Endless" => {
                    let kib = arg(0).max(1) as usize * 1024;
                    let first = match arg(1) as usize * 1024 {
                        0 => kib,
                        first => first,
                    };
                    let (tx, src) = ChanSource::new(tag, 1);
                    tokio::spawn(async move {
                        let mut i = 0;
                        let len = |i| if i == 0 { first } else { kib };
                        while tx.send(Ok(msg(i, vec![7; len(i)]))).await.is_ok() {
                            i += 1;
                        }
                    });
                    stream(src.boxed())
                }
                "Hold" => {
                    let (tx, src) = ChanSource::new(tag, 1);
                    tokio::spawn(async move {
                        let end = loop {
                            match next(&mut inbound).await {
                                None => break Ok(0),
                                Some(Ok(_)) => continue,
                                Some(Err(s)) => break Err(s.code()),
                            }
                        };
                        report(tag, Seen::InboundEnded(end));
                        // Open until the call ends (its producer is dropped then).
                        tx.closed().await;
                    });
                    // Never sends: `tx` lives in the task until the inbound ends.
                    stream(src.boxed())
                }
                "Block" => {
                    let _held = inbound;
                    std::future::pending::<()>().await;
                    unreachable!()
                }
                "Ignore" => {
                    drop(inbound);
                    // Never Err: the sender lives in POLLED for the process.
                    let _ = polled(tag).subscribe().wait_for(|&n| n >= arg(0)).await;
                    Ok(Response::new(ReplyBody::message(msg(tag, vec![]))))
                }
                m => Err(Status::unimplemented(format!("unknown method {m}"))),
            }
        })
    }
}

/// A child process's server: serves [`StreamService`] on `server`'s settings until
/// the parent closes stdin, printing `PORT n` first.
pub async fn serve_stream_until_stdin_closes(server: Server) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("PORT {}", listener.local_addr().unwrap().port());
    server
        .add_service(StreamService)
        .serve_with_listener(listener, async {
            let _ = tokio::io::stdin().read_to_end(&mut Vec::new()).await;
        })
        .await
        .unwrap();
}

/// After the server died: the stream being read ends `UNAVAILABLE` (after whatever
/// messages were already on their way), and so does the call `blocked` was making.
pub async fn assert_both_end_unavailable(
    reading: &mut BoxInbound,
    blocked: JoinHandle<Result<IncomingStream, Status>>,
) {
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match next(reading).await {
                Some(Ok(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the stream being read ends");
    let e = end.expect("ends with a status").unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    let e = tokio::time::timeout(Duration::from_secs(10), blocked)
        .await
        .expect("the blocked call ends")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
}
