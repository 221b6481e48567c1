//! After the handshake: the out-of-band TCP connection stays open as the liveness
//! channel. Its closing tells either side that the other is gone; besides that, the
//! server may send one-byte notices on it (the client sends nothing):
//!
//! | byte | notice | meaning |
//! | --- | --- | --- |
//! | `0x47` (`G`) | GOAWAY | the server is shutting down: start no new call on this connection; calls in flight are answered, then the server closes it |
//!
//! A client ignores bytes it does not know (later notices are additive).

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The GOAWAY notice.
pub const GOAWAY: u8 = b'G';

/// What the liveness channel said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// [`GOAWAY`].
    GoAway,
    /// The peer closed the connection (or it failed): the peer is gone.
    Closed,
}

/// Waits for the next notice a client acts on.
pub async fn next_notice<S: AsyncRead + Unpin>(s: &mut S) -> Notice {
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b).await {
            Ok(0) | Err(_) => return Notice::Closed,
            Ok(n) if b[..n].contains(&GOAWAY) => return Notice::GoAway,
            Ok(_) => {}
        }
    }
}

/// Sends GOAWAY (a server shutting down).
pub async fn send_goaway<S: AsyncWrite + Unpin>(s: &mut S) -> std::io::Result<()> {
    s.write_all(&[GOAWAY]).await?;
    s.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn goaway_then_close_reads_as_such_and_other_bytes_are_ignored() {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(b"xy").await.unwrap();
        send_goaway(&mut a).await.unwrap();
        assert_eq!(next_notice(&mut b).await, Notice::GoAway);
        drop(a);
        assert_eq!(next_notice(&mut b).await, Notice::Closed);
    }
}
