//! tonic's streaming workloads (HTTP/2 streams): a caller whose "call" is the next message of its
//! server stream, one message handed to its client stream, or one ping-pong round
//! trip on its bidirectional stream, and the server side of all three.

use std::pin::Pin;

use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

use crate::proto::tonic_stream::echo_stream_client::EchoStreamClient;
use crate::proto::tonic_stream::echo_stream_server::{EchoStream, EchoStreamServer};
use crate::proto::tonic_stream::{Chunk, StreamRequest, StreamSummary};
use crate::workload::Workload;

/// One stream, opened by the first call (in the warm-up) and kept for the cell.
pub(crate) struct Caller {
    client: EchoStreamClient<Channel>,
    workload: Workload,
    /// The server stream, or the bidirectional stream's inbound side.
    replies: Option<Streaming<Chunk>>,
    /// The request stream's sender: the bidirectional stream's pings, or the client
    /// stream's messages. Dropping it ends the request stream.
    outbound: Option<mpsc::Sender<Chunk>>,
    /// The client stream's call, running on its own task until the stream ends:
    /// the server's summary. Dropped with the caller, the task runs on to it alone.
    summary: Option<JoinHandle<Result<StreamSummary, Status>>>,
}

impl Caller {
    pub(crate) fn new(channel: Channel, workload: Workload) -> Caller {
        Caller {
            client: EchoStreamClient::new(channel),
            workload,
            replies: None,
            outbound: None,
            summary: None,
        }
    }

    /// The next message of the server stream, one message taken by the client
    /// stream, or one round trip: its payload length.
    pub(crate) async fn call(&mut self, payload: &Bytes) -> Result<usize, String> {
        if self.replies.is_none() && self.outbound.is_none() {
            self.open(payload.len()).await?;
        }
        if let Some(outbound) = &self.outbound {
            let chunk = Chunk {
                payload: payload.clone(),
            };
            if outbound.send(chunk).await.is_err() {
                return Err(self.closed(payload.len()).await);
            }
        }
        let Some(replies) = self.replies.as_mut() else {
            // The client stream: the channel took the message, so the stream had
            // taken the one before it.
            return Ok(payload.len());
        };
        match replies.message().await.map_err(|s| s.to_string())? {
            Some(chunk) => Ok(chunk.payload.len()),
            None => Err("the stream ended early".into()),
        }
    }

    async fn open(&mut self, size: usize) -> Result<(), String> {
        let replies = match self.workload {
            Workload::BidiPingpong => {
                let (tx, outbound) = super::channel_stream();
                self.outbound = Some(tx);
                self.client.bidi_echo(outbound).await
            }
            Workload::ClientStream => {
                let (tx, outbound) = super::channel_stream();
                let mut client = self.client.clone();
                self.summary = Some(tokio::spawn(async move {
                    let summary = client.client_stream(outbound).await?;
                    Ok(summary.into_inner())
                }));
                self.outbound = Some(tx);
                return Ok(());
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

    /// Why the request stream no longer takes messages of `size` bytes: the client
    /// stream's call has ended (the transport dropped the stream), so its outcome
    /// says.
    async fn closed(&mut self, size: usize) -> String {
        let Some(summary) = self.summary.take() else {
            return "the request stream closed".into();
        };
        match summary.await {
            Ok(Ok(s)) => format!("the client stream ended after {} messages", s.messages),
            Ok(Err(status)) if size < SMALL_DATA_FRAME => format!(
                "the client stream failed: {status} (messages under {SMALL_DATA_FRAME} B, one \
                 DATA frame each: likely h2's small-frame budget on the server, which closes the \
                 connection with ENHANCE_YOUR_CALM once the frames its handler has not read yet \
                 cost over half its connection window; RUST_LOG=h2=debug logs \"too many small \
                 DATA frames\")"
            ),
            Ok(Err(status)) => format!("the client stream failed: {status}"),
            Err(e) => format!("the client stream's task: {e}"),
        }
    }

    /// Ends the client stream and waits for the server's summary of it.
    #[cfg(test)]
    pub(super) async fn finish(mut self) -> Result<StreamSummary, String> {
        drop(self.outbound.take());
        let summary = self.summary.take().ok_or("no client stream")?;
        summary
            .await
            .map_err(|e| e.to_string())?
            .map_err(|s| s.to_string())
    }
}

/// h2's threshold (`DEFAULT_DATA_FRAME_OVERHEAD_THRESHOLD`, h2 0.4.20): a received
/// DATA frame smaller than this costs the server's small-frame budget until the
/// handler reads it (tonic's server exposes no setting for that budget).
const SMALL_DATA_FRAME: usize = 256;

type Chunks = Pin<Box<dyn Stream<Item = Result<Chunk, Status>> + Send>>;

/// Streams one shared payload (`count` times, or until cancelled), counts what a
/// client stream sends, and echoes pings.
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

    async fn client_stream(
        &self,
        req: Request<Streaming<Chunk>>,
    ) -> Result<Response<StreamSummary>, Status> {
        let mut chunks = req.into_inner();
        let mut summary = StreamSummary::default();
        // A stream that fails answers its error status.
        while let Some(chunk) = chunks.message().await? {
            summary.messages += 1;
            summary.bytes += chunk.payload.len() as u64;
        }
        Ok(Response::new(summary))
    }
}

pub(crate) fn server() -> EchoStreamServer<Service> {
    EchoStreamServer::new(Service)
}
