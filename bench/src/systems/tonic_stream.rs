//! tonic's streaming workloads (HTTP/2 streams): a caller whose "call" is the next message of its
//! server stream, or one ping-pong round trip on its bidirectional stream, and the
//! server side of both.

use std::pin::Pin;

use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

use crate::proto::tonic_stream::echo_stream_client::EchoStreamClient;
use crate::proto::tonic_stream::echo_stream_server::{EchoStream, EchoStreamServer};
use crate::proto::tonic_stream::{Chunk, StreamRequest};
use crate::workload::Workload;

/// One stream, opened by the first call (in the warm-up) and kept for the cell.
pub(crate) struct Caller {
    client: EchoStreamClient<Channel>,
    workload: Workload,
    replies: Option<Streaming<Chunk>>,
    /// The bidirectional stream's outbound side.
    pings: Option<mpsc::Sender<Chunk>>,
}

impl Caller {
    pub(crate) fn new(channel: Channel, workload: Workload) -> Caller {
        Caller {
            client: EchoStreamClient::new(channel),
            workload,
            replies: None,
            pings: None,
        }
    }

    /// The next message of the server stream, or one round trip: its payload length.
    pub(crate) async fn call(&mut self, payload: &Bytes) -> Result<usize, String> {
        if self.replies.is_none() {
            self.open(payload.len()).await?;
        }
        if let Some(pings) = &self.pings {
            let ping = Chunk {
                payload: payload.clone(),
            };
            pings
                .send(ping)
                .await
                .map_err(|_| "the request stream closed".to_string())?;
        }
        let replies = self.replies.as_mut().expect("opened above");
        match replies.message().await.map_err(|s| s.to_string())? {
            Some(chunk) => Ok(chunk.payload.len()),
            None => Err("the stream ended early".into()),
        }
    }

    async fn open(&mut self, size: usize) -> Result<(), String> {
        let replies = match self.workload {
            Workload::BidiPingpong => {
                // Capacity 1: a ping waits for the stream to take the previous one.
                let (tx, rx) = mpsc::channel::<Chunk>(1);
                let outbound =
                    stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
                self.pings = Some(tx);
                self.client.bidi_echo(outbound).await
            }
            _ => {
                let req = StreamRequest {
                    payload_bytes: size as u32,
                    count: 0,
                };
                self.client.server_stream(req).await
            }
        };
        self.replies = Some(replies.map_err(|s| s.to_string())?.into_inner());
        Ok(())
    }
}

type Chunks = Pin<Box<dyn Stream<Item = Result<Chunk, Status>> + Send>>;

/// Streams one shared payload (`count` times, or until cancelled), and echoes pings.
pub(crate) struct Service;

#[tonic::async_trait]
impl EchoStream for Service {
    type ServerStreamStream = Chunks;

    async fn server_stream(&self, req: Request<StreamRequest>) -> Result<Response<Chunks>, Status> {
        let req = req.into_inner();
        let payload = Bytes::from(vec![0x5a; req.payload_bytes as usize]);
        let chunks = stream::repeat_with(move || {
            Ok(Chunk {
                payload: payload.clone(),
            })
        });
        let chunks: Chunks = match req.count {
            0 => Box::pin(chunks),
            n => Box::pin(chunks.take(n as usize)),
        };
        Ok(Response::new(chunks))
    }

    type BidiEchoStream = Chunks;

    async fn bidi_echo(&self, req: Request<Streaming<Chunk>>) -> Result<Response<Chunks>, Status> {
        Ok(Response::new(Box::pin(req.into_inner())))
    }
}

pub(crate) fn server() -> EchoStreamServer<Service> {
    EchoStreamServer::new(Service)
}
