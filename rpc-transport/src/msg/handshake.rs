//! The out-of-band queue-pair exchange over a TCP connection to `host:port`.
//!
//! Each side sends one [`Envelope`]: its QP endpoint and an opaque payload that the
//! layer above reads (rdma-rpc puts its versioned negotiation there; this crate never
//! looks inside). The TCP connection stays open for the life of the RDMA connection:
//! its closing ([`closed`]) is how each side learns that the other is gone (a process
//! that dies closes it too).
//!
//! Wire layout of one envelope (big endian, [`HEADER_LEN`] bytes then the payload):
//! ```text
//! 0 magic "QPEX"  4 payload_len:u16  6 QpEndpoint (26 bytes, QpEndpoint::to_bytes)
//! 32 payload (payload_len bytes, at most MAX_PAYLOAD)
//! ```
//! The magic is this framing's own: a peer that sends anything else is refused at
//! once, after its first 6 bytes, with a [`Stranger`] error carrying them (so the
//! layer above can recognise an older protocol of its own and answer it in kind).
//! A side with no queue pair to offer (one that refuses) sends
//! `QpEndpoint::default()`.

use std::fmt;
use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::addr::QpEndpoint;

/// Framing magic of the exchange.
pub const MAGIC: [u8; 4] = *b"QPEX";
/// Largest payload an envelope carries; a longer one is refused by both sides.
pub const MAX_PAYLOAD: usize = 4096;
/// Bytes before the payload: magic, payload length, endpoint.
pub const HEADER_LEN: usize = 6 + QpEndpoint::WIRE_LEN;
/// Bytes read before the magic is checked.
const HEAD_LEN: usize = 6;

/// What one side sends: its QP and the upper layer's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The sender's QP (all zeros from a side that has none to offer).
    pub endpoint: QpEndpoint,
    /// Opaque to this crate, at most [`MAX_PAYLOAD`] bytes.
    pub payload: Vec<u8>,
}

impl Envelope {
    /// Encodes, refusing a payload over [`MAX_PAYLOAD`].
    pub fn to_bytes(&self) -> io::Result<Vec<u8>> {
        let len = self.payload.len();
        if len > MAX_PAYLOAD {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, oversize(len)));
        }
        let mut b = Vec::with_capacity(HEADER_LEN + len);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&(len as u16).to_be_bytes());
        b.extend_from_slice(&self.endpoint.to_bytes());
        b.extend_from_slice(&self.payload);
        Ok(b)
    }
}

fn oversize(len: usize) -> String {
    format!("handshake payload of {len} bytes exceeds the limit of {MAX_PAYLOAD}")
}

/// The peer does not speak this exchange: its first bytes had another magic. Found
/// inside the `io::Error` that [`recv`] returns ([`Stranger::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stranger {
    head: [u8; HEAD_LEN],
}

impl Stranger {
    /// The stranger inside `e`, if `e` is one.
    pub fn of(e: &io::Error) -> Option<&Stranger> {
        e.get_ref()?.downcast_ref()
    }

    /// The first bytes the peer sent.
    pub fn head(&self) -> &[u8] {
        &self.head
    }
}

impl fmt::Display for Stranger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the peer does not speak the queue-pair exchange (bad handshake magic, first bytes {:02x?})",
            self.head
        )
    }
}

impl std::error::Error for Stranger {}

/// Writes an envelope.
pub async fn send<S: AsyncWrite + Unpin>(
    s: &mut S,
    endpoint: &QpEndpoint,
    payload: &[u8],
) -> io::Result<()> {
    let env = Envelope {
        endpoint: *endpoint,
        payload: payload.to_vec(),
    };
    s.write_all(&env.to_bytes()?).await?;
    s.flush().await
}

/// Reads an envelope: a stranger is refused after its first 6 bytes, a payload
/// length over [`MAX_PAYLOAD`] before its payload is read.
pub async fn recv<S: AsyncRead + Unpin>(s: &mut S) -> io::Result<Envelope> {
    let mut head = [0u8; HEAD_LEN];
    s.read_exact(&mut head).await?;
    if head[0..4] != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            Stranger { head },
        ));
    }
    let len = usize::from(u16::from_be_bytes([head[4], head[5]]));
    if len > MAX_PAYLOAD {
        return Err(io::Error::new(io::ErrorKind::InvalidData, oversize(len)));
    }
    let mut ep = [0u8; QpEndpoint::WIRE_LEN];
    s.read_exact(&mut ep).await?;
    let endpoint = QpEndpoint::from_bytes(&ep)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await?;
    Ok(Envelope { endpoint, payload })
}

/// Returns when the peer closes the connection (or it fails): the peer is gone.
pub async fn closed<S: AsyncRead + Unpin>(s: &mut S) {
    let mut b = [0u8; 64];
    while let Ok(n) = s.read(&mut b).await {
        if n == 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Gid;

    fn endpoint() -> QpEndpoint {
        QpEndpoint {
            lid: 1,
            qpn: 2,
            psn: 3,
            gid: Gid([7; 16]),
        }
    }

    /// Runs `f` on a current-thread runtime (the exchange only needs `AsyncRead`,
    /// which `&[u8]` is).
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn envelope_round_trips_with_empty_and_largest_payloads() {
        for len in [0, 1, 37, MAX_PAYLOAD] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut wire = Vec::new();
            block_on(send(&mut wire, &endpoint(), &payload)).unwrap();
            assert_eq!(wire.len(), HEADER_LEN + len);
            let got = block_on(recv(&mut &wire[..])).unwrap();
            assert_eq!(
                got,
                Envelope {
                    endpoint: endpoint(),
                    payload
                }
            );
        }
    }

    #[test]
    fn a_stranger_is_refused_after_six_bytes_with_its_bytes() {
        // Six bytes and no more: the refusal must not wait for a full header.
        let e = block_on(recv(&mut &b"RRPC\x00\x01"[..])).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let s = Stranger::of(&e).expect("a stranger");
        assert_eq!(s.head(), b"RRPC\x00\x01");
        assert!(e.to_string().contains("bad handshake magic"), "{e}");
    }

    #[test]
    fn oversize_payloads_are_refused_both_ways() {
        let big = vec![0u8; MAX_PAYLOAD + 1];
        let mut wire = Vec::new();
        let e = block_on(send(&mut wire, &endpoint(), &big)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("exceeds the limit of 4096"), "{e}");
        assert!(wire.is_empty(), "nothing is written");

        // A header announcing too much is refused before the payload is read.
        let mut head = Vec::from(MAGIC);
        head.extend_from_slice(&((MAX_PAYLOAD + 1) as u16).to_be_bytes());
        let e = block_on(recv(&mut &head[..])).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("exceeds the limit"), "{e}");
        assert!(Stranger::of(&e).is_none());
    }

    #[test]
    fn truncated_envelopes_are_errors() {
        let mut wire = Vec::new();
        block_on(send(&mut wire, &endpoint(), b"payload")).unwrap();
        for cut in 0..wire.len() {
            let e = block_on(recv(&mut &wire[..cut])).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "cut at {cut}");
        }
    }
}
