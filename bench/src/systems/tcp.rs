//! The raw baseline: a 4-byte little-endian length, then the payload, each way, on
//! plain tokio TCP streams with TCP_NODELAY; one connection per call in flight (no
//! pipelining), so concurrency N is N connections. One write per message each way.
//! The client and the echo are generic over how bytes move ([`Wire`]): `tcp-spin`
//! runs them on busy-polled sockets.

use std::future::Future;
use std::io;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::MAX_MESSAGE;

/// A connection's reads and writes: tokio's, which wait for readiness, or
/// `tcp-spin`'s, which busy-poll.
pub(crate) trait Wire {
    /// Fills `buf`.
    async fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()>;
    /// Writes all of `buf`.
    async fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
}

impl Wire for TcpStream {
    async fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        AsyncReadExt::read_exact(self, buf).await.map(|_| ())
    }

    async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        AsyncWriteExt::write_all(self, buf).await
    }
}

/// One connection and its reusable buffers.
pub(crate) struct Caller<S = TcpStream> {
    stream: S,
    /// Length prefix and payload, built once per payload size.
    frame: Vec<u8>,
    reply: Vec<u8>,
}

impl<S: Wire> Caller<S> {
    /// A caller on a connected `stream`.
    pub(super) fn new(stream: S) -> Caller<S> {
        Caller {
            stream,
            frame: Vec::new(),
            reply: Vec::new(),
        }
    }

    pub(crate) async fn call(&mut self, payload: &Bytes) -> Result<usize, String> {
        if self.frame.len() != 4 + payload.len() {
            self.frame.clear();
            self.frame
                .extend_from_slice(&(payload.len() as u32).to_le_bytes());
            self.frame.extend_from_slice(payload);
        }
        let io = |e: io::Error| e.to_string();
        self.stream.write_all(&self.frame).await.map_err(io)?;
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).await.map_err(io)?;
        let n = u32::from_le_bytes(len) as usize;
        if n > MAX_MESSAGE {
            return Err(format!("reply of {n} bytes is over the limit"));
        }
        self.reply.resize(n, 0);
        self.stream.read_exact(&mut self.reply).await.map_err(io)?;
        Ok(n)
    }
}

pub(crate) async fn connect(addr: &str, concurrency: usize) -> Result<Vec<Caller>, String> {
    connect_with(addr, concurrency, |s| s.set_nodelay(true).map(|()| s)).await
}

/// `concurrency` connections to `addr`, each made ready by `wire` (TCP_NODELAY, and
/// for `tcp-spin` non-blocking).
pub(super) async fn connect_with<S: Wire>(
    addr: &str,
    concurrency: usize,
    wire: impl Fn(TcpStream) -> io::Result<S>,
) -> Result<Vec<Caller<S>>, String> {
    let mut out = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        out.push(Caller::new(wire(stream).map_err(|e| e.to_string())?));
    }
    Ok(out)
}

pub(crate) async fn serve(
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    accept_until(listener, stop, |stream| {
        if stream.set_nodelay(true).is_ok() {
            tokio::spawn(echo(stream));
        }
    })
    .await
}

/// Hands each accepted connection to `serve_one` until `stop` completes.
pub(super) async fn accept_until(
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
    serve_one: impl Fn(TcpStream),
) -> Result<(), String> {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return Ok(()),
            r = listener.accept() => serve_one(r.map_err(|e| e.to_string())?.0),
        }
    }
}

/// Echoes frames until the client closes the connection (or sends a bad length).
pub(super) async fn echo<S: Wire>(mut stream: S) {
    let mut buf = vec![0u8; 4];
    loop {
        if stream.read_exact(&mut buf[..4]).await.is_err() {
            return;
        }
        let n = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if n > MAX_MESSAGE {
            return;
        }
        buf.resize(4 + n, 0);
        if stream.read_exact(&mut buf[4..]).await.is_err() {
            return;
        }
        if stream.write_all(&buf).await.is_err() {
            return;
        }
    }
}
