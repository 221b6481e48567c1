//! The TCP baseline: the same exchange between the same two processes over a plain
//! `TcpStream` with TCP_NODELAY and blocking reads, as a socket program would do it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::oob::Params;
use crate::stats::Summary;
use crate::Result;

/// Client: ping-pong then streaming, over a new connection to `addr`.
pub(crate) fn client(addr: &str, p: Params) -> Result<Summary> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let msg = vec![0xa5u8; p.size as usize];
    let mut echo = vec![0u8; p.size as usize];
    let mut rtts = Vec::with_capacity(p.iters as usize);
    for i in 0..p.warmup + p.iters {
        let start = Instant::now();
        s.write_all(&msg)?;
        s.read_exact(&mut echo)?;
        if i >= p.warmup {
            rtts.push(start.elapsed());
        }
    }
    let start = Instant::now();
    for _ in 0..p.iters {
        s.write_all(&msg)?;
    }
    s.read_exact(&mut [0u8])?;
    let elapsed: Duration = start.elapsed();
    let bytes = u64::from(p.iters) * u64::from(p.size);
    Ok(Summary::new(&mut rtts, bytes, elapsed))
}

/// Server: accepts one connection on `listener`, echoes, then drains the stream and
/// replies with one byte.
pub(crate) fn serve(listener: &TcpListener, p: Params) -> Result<()> {
    let (mut s, _) = listener.accept()?;
    s.set_nodelay(true)?;
    let mut msg = vec![0u8; p.size as usize];
    for _ in 0..p.warmup + p.iters {
        s.read_exact(&mut msg)?;
        s.write_all(&msg)?;
    }
    // Streamed bytes are read in large chunks, as a socket application would.
    let mut left = u64::from(p.iters) * u64::from(p.size);
    let mut chunk = vec![0u8; 256 * 1024];
    while left > 0 {
        let want = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = s.read(&mut chunk[..want])?;
        if n == 0 {
            return Err("client closed the TCP stream early".into());
        }
        left -= n as u64;
    }
    s.write_all(&[1])?;
    Ok(())
}
