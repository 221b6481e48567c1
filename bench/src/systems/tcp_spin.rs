//! The raw TCP loop, busy-polling: the same frames, client and echo as `tcp`, but on
//! non-blocking sockets outside tokio's reactor, read or written again whenever they
//! would block, with only a yield to the runtime in between: nobody sleeps until the
//! kernel wakes them. What remains is the kernel's own path for a message: the socket
//! floor. Each side burns its core while it waits.

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::TcpStream;

use tokio::net::TcpListener;

use super::tcp::{self, Wire};

/// A client connection of `tcp-spin`.
pub(crate) type Caller = tcp::Caller<Spinning>;

/// A non-blocking TCP stream with TCP_NODELAY, never parked on readiness.
pub(crate) struct Spinning(TcpStream);

impl Spinning {
    fn new(stream: tokio::net::TcpStream) -> io::Result<Spinning> {
        let stream = stream.into_std()?;
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(Spinning(stream))
    }
}

/// Retries `op` until it moves bytes or fails. When it would block, the task yields
/// (tokio polls it again after the other ready tasks: a wake-up of itself would keep
/// it at the front and starve them).
async fn spin(mut op: impl FnMut() -> io::Result<usize>) -> io::Result<usize> {
    loop {
        match op() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tokio::task::yield_now().await,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

impl Wire for Spinning {
    async fn read_exact(&mut self, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match spin(|| self.0.read(buf)).await? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => buf = &mut buf[n..],
            }
        }
        Ok(())
    }

    async fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match spin(|| self.0.write(buf)).await? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => buf = &buf[n..],
            }
        }
        Ok(())
    }
}

pub(crate) async fn connect(addr: &str, concurrency: usize) -> Result<Vec<Caller>, String> {
    tcp::connect_with(addr, concurrency, Spinning::new).await
}

pub(crate) async fn serve(
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    tcp::accept_until(listener, stop, |stream| {
        if let Ok(stream) = Spinning::new(stream) {
            tokio::spawn(tcp::echo(stream));
        }
    })
    .await
}
