//! A large stream message is encoded without holding the worker its stream writer
//! runs on, as a large unary body is (`large_request_encoding.rs`): a client's on
//! tokio's blocking pool, on any runtime (here the current-thread one); a server's
//! under `block_in_place`, so that its worker's other tasks run meanwhile. A small
//! message is encoded in line.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread::ThreadId;
use std::time::Duration;

use prost::Message;
use rpc_core::client::OutgoingStream;
use rpc_core::server::{BoxFuture, NamedService, ReplyBody, ServerCall, ServerReply};
use rpc_core::stream::{BoxMessageSource, MessageSource};
use rpc_core::transport::{Channel, Endpoint, Server};
use rpc_core::{Extensions, MetadataMap, Response, Status};
use tests::raw_stream::{open, read_all, CountSource, StreamService};
use tests::Echo;
use tower::{Service, ServiceExt};

const LARGE: usize = 8 << 20;
const SMALL: usize = 1024;
const MAX_MESSAGE: usize = 16 << 20;

/// What an encode of a message of this many data bytes does first.
type OnEncode = Arc<dyn Fn(usize) + Send + Sync>;

/// Messages of the given data lengths; `on_encode` runs as each is encoded.
struct Probe {
    lens: VecDeque<usize>,
    current: Option<Echo>,
    on_encode: OnEncode,
}

impl Probe {
    fn boxed(lens: &[usize], on_encode: OnEncode) -> BoxMessageSource {
        Box::pin(Probe {
            lens: lens.iter().copied().collect(),
            current: None,
            on_encode,
        })
    }
}

impl MessageSource for Probe {
    fn poll_message(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<usize, Status>>> {
        let Some(len) = self.lens.pop_front() else {
            return Poll::Ready(None);
        };
        let m = Echo {
            id: len as u64,
            data: vec![3; len],
        };
        let encoded = m.encoded_len();
        self.current = Some(m);
        Poll::Ready(Some(Ok(encoded)))
    }

    fn encode_current(mut self: Pin<&mut Self>, mut out: &mut [u8]) {
        let m = self.current.take().expect("a current message");
        (self.on_encode)(m.data.len());
        m.encode_raw(&mut out);
    }
}

#[tokio::test]
async fn a_clients_large_stream_message_is_encoded_off_the_callers_thread() {
    let (mut ch, stop) = stream_service().await;
    let encoded_on = Arc::new(Mutex::new(Vec::<(usize, ThreadId)>::new()));
    let noted = encoded_on.clone();
    let on_encode: OnEncode = Arc::new(move |len| {
        noted
            .lock()
            .unwrap()
            .push((len, std::thread::current().id()))
    });
    // `Sum` answers how many messages came and their total length.
    let source = Probe::boxed(&[LARGE, SMALL], on_encode);
    let mut call = open(&mut ch, "Sum", 1, &[], None, source).await.unwrap();
    let (answers, end) = read_all(&mut call.messages).await;
    end.unwrap();
    let sums: Vec<(u64, Vec<u8>)> = answers.into_iter().map(|m| (m.id, m.data)).collect();
    let total = (LARGE + SMALL) as u64;
    assert_eq!(sums, vec![(2, total.to_be_bytes().to_vec())]);
    let caller = std::thread::current().id();
    let seen = encoded_on.lock().unwrap().clone();
    let lens: Vec<usize> = seen.iter().map(|s| s.0).collect();
    assert_eq!(
        lens,
        vec![LARGE, SMALL],
        "each message encoded once, in order"
    );
    assert_ne!(
        seen[0].1, caller,
        "the 8 MiB stream message was encoded on the caller's thread"
    );
    assert_eq!(seen[1].1, caller, "the 1 KiB stream message was handed off");
    drop(stop);
}

#[tokio::test]
async fn a_client_source_that_panics_encoding_a_large_message_ends_its_call_internal() {
    let (mut ch, stop) = stream_service().await;
    let on_encode: OnEncode = Arc::new(|_| panic!("a broken message"));
    let source = Probe::boxed(&[LARGE], on_encode);
    // Reset before or after the server's headers came: the call's opening or its
    // response stream ends with the status.
    let end = match open(&mut ch, "Sum", 2, &[], None, source).await {
        Err(s) => s,
        Ok(mut call) => {
            let (answers, end) = read_all(&mut call.messages).await;
            assert_eq!(answers.len(), 0, "answered a call whose message failed");
            end.unwrap_err()
        }
    };
    assert_eq!(
        (end.code(), end.message()),
        (rpc_core::Code::Internal, "encoding the request panicked")
    );
    // The channel still serves.
    let source = Probe::boxed(&[SMALL], Arc::new(|_| ()));
    let mut call = open(&mut ch, "Sum", 3, &[], None, source).await.unwrap();
    let (answers, end) = read_all(&mut call.messages).await;
    end.unwrap();
    assert_eq!(answers.iter().map(|m| m.id).collect::<Vec<_>>(), vec![1]);
    drop(stop);
}

/// `test.Probe`: any call answers a stream of one 8 MiB message then one of 1 KiB;
/// encoding the large one first waits for a task spawned on the server's runtime
/// to run, and notes whether it did within 10 s.
#[derive(Clone)]
struct ProbeService {
    ran_meanwhile: Arc<Mutex<Vec<bool>>>,
}

impl NamedService for ProbeService {
    const NAME: &'static str = "test.Probe";
}

impl Service<ServerCall> for ProbeService {
    type Response = ServerReply;
    type Error = Status;
    type Future = BoxFuture<ServerReply>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: ServerCall) -> Self::Future {
        let ran_meanwhile = self.ran_meanwhile.clone();
        let on_encode: OnEncode = Arc::new(move |len| {
            if len < LARGE {
                return;
            }
            let (tx, rx) = std::sync::mpsc::channel();
            tokio::spawn(async move {
                let _ = tx.send(());
            });
            let ran = rx.recv_timeout(Duration::from_secs(10)).is_ok();
            ran_meanwhile.lock().unwrap().push(ran);
        });
        let source = Probe::boxed(&[LARGE, SMALL], on_encode);
        Box::pin(async move { Ok(Response::new(ReplyBody::Stream(source))) })
    }
}

/// One worker, which the client shares: a task the encoding spawns can run only if
/// the encoding gave the worker up.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_servers_large_stream_message_leaves_its_worker_to_other_tasks() {
    let ran_meanwhile = Arc::new(Mutex::new(Vec::new()));
    let service = ProbeService {
        ran_meanwhile: ran_meanwhile.clone(),
    };
    let (addr, stop) = tests::serve_router(
        Server::builder()
            .max_message_size(MAX_MESSAGE)
            .add_service(service),
    )
    .await;
    let mut ch = channel(addr).await;
    ServiceExt::<OutgoingStream>::ready(&mut ch).await.unwrap();
    let mut call = ch
        .call(OutgoingStream {
            path: "/test.Probe/Send",
            metadata: MetadataMap::new(),
            timeout: None,
            extensions: Extensions::new(),
            messages: CountSource::boxed(0, 0, 0, None),
        })
        .await
        .unwrap();
    let (messages, end) = read_all(&mut call.messages).await;
    end.unwrap();
    let lens: Vec<usize> = messages.iter().map(|m| m.data.len()).collect();
    assert_eq!(lens, vec![LARGE, SMALL]);
    assert_eq!(
        *ran_meanwhile.lock().unwrap(),
        vec![true],
        "a task spawned while the 8 MiB message was encoded did not run meanwhile"
    );
    drop(stop);
}

/// `test.Stream` served with room for the large message, and a channel to it.
async fn stream_service() -> (Channel, tokio::sync::oneshot::Sender<()>) {
    let (addr, stop) = tests::serve_router(
        Server::builder()
            .max_message_size(MAX_MESSAGE)
            .add_service(StreamService),
    )
    .await;
    (channel(addr).await, stop)
}

async fn channel(addr: std::net::SocketAddr) -> Channel {
    Endpoint::from_shared(format!("rdma://{addr}"))
        .unwrap()
        .max_message_size(MAX_MESSAGE)
        .connect()
        .await
        .unwrap()
}
