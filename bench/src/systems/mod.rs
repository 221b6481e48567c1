//! Clients and servers of each system, behind one `Caller` (a client slot that makes
//! one call at a time) and one `serve` entry.

mod rdma;
mod rdma_stream;
mod rdma_upload;
mod tcp;
mod tcp_spin;
mod tonic;
mod tonic_stream;
mod tonic_uds;
mod tonic_upload;

use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;
use tokio::net::TcpListener;

use crate::provider::Provider;
use crate::system::System;
use crate::workload::Workload;

pub(crate) use tonic_uds::socket_path as uds_socket_path;

/// Largest message any system is configured to carry each way (rdma-rpc's default
/// maximum; tonic's and the TCP loop's are raised to it).
pub(crate) const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// A request stream fed by a channel of capacity 1 (the streaming callers' of both
/// systems): a send waits for the stream to take the previous message.
fn channel_stream<T: Send + 'static>() -> (
    tokio::sync::mpsc::Sender<T>,
    impl futures_util::Stream<Item = T> + Send + 'static,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<T>(1);
    let items =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    (tx, items)
}

/// One call in flight at a time; a cell runs `concurrency` of them at once.
pub(crate) enum Caller {
    /// A clone of one rdma-rpc client (clones share the connection).
    Rdma(rdma::Caller),
    /// A clone of one tonic client (clones share the HTTP/2 connection, on TCP or
    /// on a Unix socket).
    Tonic(tonic::Caller),
    /// Its own TCP connection.
    Tcp(tcp::Caller),
    /// Its own busy-polled TCP connection.
    TcpSpin(tcp_spin::Caller),
    /// One rdma-rpc stream (server, client or bidirectional) on the cell's shared connection
    /// (boxed: a stream's state is large; one box per caller per cell).
    RdmaStream(Box<rdma_stream::Caller>),
    /// One tonic stream on the cell's shared HTTP/2 connection.
    TonicStream(Box<tonic_stream::Caller>),
    /// A clone of one rdma-rpc upload client.
    RdmaUpload(rdma_upload::Caller),
    /// A clone of one tonic upload client (on TCP or on a Unix socket).
    TonicUpload(tonic_upload::Caller),
}

impl Caller {
    /// One echo call of `payload` (streaming workloads: the next message of the
    /// server stream, one message taken by the client stream, or one ping-pong
    /// round trip; upload: one call carrying it); the reply's length (upload: the
    /// length the server counted; client stream: the message's own) is checked.
    pub(crate) async fn call(&mut self, payload: &Bytes) -> Result<(), String> {
        let got = match self {
            Caller::Rdma(c) => c.call(payload).await?,
            Caller::Tonic(c) => c.call(payload).await?,
            Caller::Tcp(c) => c.call(payload).await?,
            Caller::TcpSpin(c) => c.call(payload).await?,
            Caller::RdmaStream(c) => c.call(payload).await?,
            Caller::TonicStream(c) => c.call(payload).await?,
            Caller::RdmaUpload(c) => c.call(payload).await?,
            Caller::TonicUpload(c) => c.call(payload).await?,
        };
        if got != payload.len() {
            return Err(format!(
                "the reply counts {got} bytes, the request carried {}",
                payload.len()
            ));
        }
        Ok(())
    }
}

/// `concurrency` callers of `system` running `workload`, connected to the server at
/// `addr` (streaming workloads: one connection, one stream per caller).
pub(crate) async fn connect(
    system: System,
    workload: Workload,
    addr: SocketAddr,
    concurrency: usize,
    provider: &Provider,
) -> Result<Vec<Caller>, String> {
    let url = system.url(addr);
    if !workload.runs_on(system) {
        return Err(format!("{system} does not run {workload}"));
    }
    if workload == Workload::Upload {
        let tonic_callers = |channel| {
            let all = tonic_upload::Caller::all(channel, concurrency);
            all.into_iter().map(Caller::TonicUpload).collect()
        };
        return Ok(match system {
            System::Tonic => tonic_callers(tonic::channel(&url).await?),
            System::TonicUds => tonic_callers(tonic_uds::channel(&url).await?),
            _ => {
                let tcp_link = system == System::RdmaRpcTcp;
                let channel = rdma::channel(&url, provider, tcp_link).await?;
                let all = rdma_upload::Caller::all(channel, concurrency);
                all.into_iter().map(Caller::RdmaUpload).collect()
            }
        });
    }
    if workload.is_streaming() {
        return Ok(match system {
            System::Tonic => {
                let channel = tonic::channel(&url).await?;
                (0..concurrency)
                    .map(|_| {
                        Caller::TonicStream(Box::new(tonic_stream::Caller::new(
                            channel.clone(),
                            workload,
                        )))
                    })
                    .collect()
            }
            _ => {
                let channel = rdma::channel(&url, provider, false).await?;
                (0..concurrency)
                    .map(|_| {
                        Caller::RdmaStream(Box::new(rdma_stream::Caller::new(
                            channel.clone(),
                            workload,
                        )))
                    })
                    .collect()
            }
        });
    }
    let callers = match system {
        System::RdmaRpc | System::RdmaRpcUd => rdma::connect(&url, concurrency, provider, false)
            .await?
            .into_iter()
            .map(Caller::Rdma)
            .collect(),
        System::RdmaRpcTcp => rdma::connect(&url, concurrency, provider, true)
            .await?
            .into_iter()
            .map(Caller::Rdma)
            .collect(),
        System::Tonic => tonic::connect(&url, concurrency)
            .await?
            .into_iter()
            .map(Caller::Tonic)
            .collect(),
        System::TonicUds => tonic_uds::connect(&url, concurrency)
            .await?
            .into_iter()
            .map(Caller::Tonic)
            .collect(),
        System::Tcp => tcp::connect(&url, concurrency)
            .await?
            .into_iter()
            .map(Caller::Tcp)
            .collect(),
        System::TcpSpin => tcp_spin::connect(&url, concurrency)
            .await?
            .into_iter()
            .map(Caller::TcpSpin)
            .collect(),
    };
    Ok(callers)
}

/// Serves `system`'s echo on `listener` until `stop` completes.
pub(crate) async fn serve(
    system: System,
    listener: TcpListener,
    provider: &Provider,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    match system.server() {
        System::RdmaRpc | System::RdmaRpcUd => rdma::serve(listener, provider, false, stop).await,
        System::RdmaRpcTcp => rdma::serve(listener, provider, true, stop).await,
        System::Tonic => tonic::serve(listener, stop).await,
        System::TonicUds => tonic_uds::serve(listener, stop).await,
        System::Tcp => tcp::serve(listener, stop).await,
        System::TcpSpin => tcp_spin::serve(listener, stop).await,
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;
    use crate::provider::ProviderArg;

    /// Serves `system` in this process until the returned sender is dropped.
    async fn server(system: System, provider: &Provider) -> (SocketAddr, oneshot::Sender<()>) {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let provider = provider.clone();
        tokio::spawn(async move {
            let stop = async {
                let _ = stopped.await;
            };
            serve(system, listener, &provider, stop).await
        });
        (addr, stop)
    }

    /// Every message a client stream's calls handed over reaches the server, which
    /// counts them and their bytes once the caller ends the stream; a caller dropped
    /// mid-stream ends its stream too (the server still answers the next one).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_stream_delivers_every_message_it_took() {
        const CALLS: u64 = 40;
        let provider = Provider::resolve(ProviderArg::Soft, None).unwrap();
        let payload = Bytes::from(vec![0xa5; 64 * 1024]);
        for system in [System::RdmaRpc, System::Tonic] {
            let (addr, _stop) = server(system, &provider).await;
            let url = system.url(addr);
            for finished in [false, true] {
                let summary = match system {
                    System::Tonic => {
                        let channel = tonic::channel(&url).await.unwrap();
                        let mut c = tonic_stream::Caller::new(channel, Workload::ClientStream);
                        for _ in 0..CALLS {
                            assert_eq!(c.call(&payload).await, Ok(payload.len()));
                        }
                        if !finished {
                            continue;
                        }
                        c.finish().await.map(|s| (s.messages, s.bytes))
                    }
                    _ => {
                        let channel = rdma::channel(&url, &provider, false).await.unwrap();
                        let mut c = rdma_stream::Caller::new(channel, Workload::ClientStream);
                        for _ in 0..CALLS {
                            assert_eq!(c.call(&payload).await, Ok(payload.len()));
                        }
                        if !finished {
                            continue;
                        }
                        c.finish().await.map(|s| (s.messages, s.bytes))
                    }
                };
                let (messages, bytes) = summary.unwrap_or_else(|e| panic!("{system}: {e}"));
                assert_eq!(messages, CALLS, "{system}");
                assert_eq!(bytes, CALLS * payload.len() as u64, "{system}");
            }
        }
    }
}
