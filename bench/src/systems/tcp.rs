//! The raw baseline: a 4-byte little-endian length, then the payload, each way, on
//! plain tokio TCP streams with TCP_NODELAY; one connection per call in flight (no
//! pipelining), so concurrency N is N connections. One write per message each way.

use std::future::Future;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::MAX_MESSAGE;

/// One connection and its reusable buffers.
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
        let io = |e: std::io::Error| e.to_string();
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
    let mut out = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        out.push(Caller {
            stream,
            frame: Vec::new(),
            reply: Vec::new(),
        });
    }
    Ok(out)
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
                tokio::spawn(echo(stream));
            }
        }
    }
}

/// Echoes frames until the client closes the connection (or sends a bad length).
async fn echo(mut stream: TcpStream) {
    if stream.set_nodelay(true).is_err() {
        return;
    }
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
