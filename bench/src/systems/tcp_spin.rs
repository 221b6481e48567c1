//! The raw TCP loop, busy-polling: the same frames as `tcp` (a 4-byte little-endian
//! length, then the payload, each way; one connection per call in flight), but every
//! socket is non-blocking and read or written again at once when it would block,
//! yielding to the runtime in between and never sleeping until the kernel wakes it.
//! What remains is the kernel's own path for a message: the socket floor.

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::TcpStream;

use bytes::Bytes;
use tokio::net::TcpListener;

use super::MAX_MESSAGE;

/// One non-blocking connection and its reusable buffers.
pub(crate) struct Caller {
    stream: TcpStream,
    /// Length prefix and payload, built once per payload size.
    frame: Vec<u8>,
    reply: Vec<u8>,
}

impl Caller {
    pub(crate) async fn call(&mut self, payload: &Bytes) -> Result<usize, String> {
        if self.frame.len() != 4 + payload.len() {
            self.frame.clear();
            self.frame
                .extend_from_slice(&(payload.len() as u32).to_le_bytes());
            self.frame.extend_from_slice(payload);
        }
        let io = |e: io::Error| e.to_string();
        write_all(&self.stream, &self.frame).await.map_err(io)?;
        let mut len = [0u8; 4];
        read_exact(&self.stream, &mut len).await.map_err(io)?;
        let n = u32::from_le_bytes(len) as usize;
        if n > MAX_MESSAGE {
            return Err(format!("reply of {n} bytes is over the limit"));
        }
        self.reply.resize(n, 0);
        read_exact(&self.stream, &mut self.reply)
            .await
            .map_err(io)?;
        Ok(n)
    }
}

pub(crate) async fn connect(addr: &str, concurrency: usize) -> Result<Vec<Caller>, String> {
    let mut out = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        out.push(Caller {
            stream: spinning(stream)?,
            frame: Vec::new(),
            reply: Vec::new(),
        });
    }
    Ok(out)
}

/// `stream` as a non-blocking std socket with TCP_NODELAY, outside tokio's reactor
/// (its reads and writes are never parked on readiness).
fn spinning(stream: tokio::net::TcpStream) -> Result<TcpStream, String> {
    let stream = stream.into_std().map_err(|e| e.to_string())?;
    stream.set_nonblocking(true).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    Ok(stream)
}

/// Writes all of `buf`, retrying at once whenever the socket would block.
async fn write_all(mut s: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match s.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tokio::task::yield_now().await,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buf`, retrying at once whenever the socket has nothing yet.
async fn read_exact(mut s: &TcpStream, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match s.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tokio::task::yield_now().await,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub(crate) async fn serve(
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return Ok(()),
            r = listener.accept() => {
                let (stream, _) = r.map_err(|e| e.to_string())?;
                if let Ok(stream) = spinning(stream) {
                    tokio::spawn(echo(stream));
                }
            }
        }
    }
}

/// Echoes frames until the client closes the connection (or sends a bad length).
async fn echo(stream: TcpStream) {
    let mut buf = vec![0u8; 4];
    loop {
        if read_exact(&stream, &mut buf[..4]).await.is_err() {
            return;
        }
        let n = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if n > MAX_MESSAGE {
            return;
        }
        buf.resize(4 + n, 0);
        if read_exact(&stream, &mut buf[4..]).await.is_err() {
            return;
        }
        if write_all(&stream, &buf).await.is_err() {
            return;
        }
    }
}
