//! The connection handshake over an out-of-band TCP connection to `host:port`.
//!
//! The client sends a [`Hello`] with its QP endpoint and what it asks for; the server
//! connects its QP to the client's and answers with its own `Hello` (what it grants,
//! or the `REJECTED` flag); then the client connects its QP. The TCP connection stays
//! open for the life of the RDMA connection: its closing is how each side learns
//! that the other is gone (a process that dies closes it too).
//!
//! Wire layout (big endian, [`Hello::WIRE_LEN`] bytes):
//! ```text
//! 0 magic "RRPC"  4 version:u16  6 flags:u16 (bit 0 = rejected)
//! 8 QpEndpoint (26 bytes, QpEndpoint::to_bytes)
//! 34 slot_size:u32  38 credits:u32  42 max_message:u64
//! ```
//! `slot_size` is the frame size both sides use (the server's wins), `credits` the
//! frames the client may have unanswered (receives the server reserves for it), and
//! `max_message` the largest message body each side accepts.
//!
//! # UD sessions (flag bit 1, [`FLAG_UD`])
//!
//! A client that calls over UD sets [`FLAG_UD`]; its `endpoint` is then its UD QP,
//! `credits` the calls it wants outstanding (its window) and `slot_size` the largest
//! datagram payload it can receive. A [`UdHello`] (12 bytes) follows each `Hello`
//! that carries the flag, in both directions:
//! ```text
//! 0 session:u32 (server-assigned; 0 from the client)  4 qkey:u32
//! 8 ud_flags:u32 (bit 0 = the server also accepts RC connections)
//! ```
//! The server answers with its UD QP as `endpoint`, the window it grants as
//! `credits`, and the UD payload limit (the smaller of both sides' datagrams) as
//! `slot_size`. A refusal sets [`FLAG_REJECTED`]; with [`FLAG_SESSIONS_FULL`] as well,
//! `credits` is the server's session limit that was reached. Peers that never set
//! `FLAG_UD` exchange exactly the bytes of version 1 without it, so RC is unchanged.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::addr::QpEndpoint;

/// Protocol magic.
pub const MAGIC: [u8; 4] = *b"RRPC";
/// Current protocol version; a peer with another version is refused.
pub const VERSION: u16 = 1;
/// Flag: the server refuses the connection (e.g. its receive pool is fully granted).
pub const FLAG_REJECTED: u16 = 1;
/// Flag: a UD session, not an RC connection; a [`UdHello`] follows the `Hello`.
pub const FLAG_UD: u16 = 2;
/// Flag (with [`FLAG_REJECTED`]): the server's UD session limit, in `credits`, is reached.
pub const FLAG_SESSIONS_FULL: u16 = 4;
/// Flag (with [`FLAG_REJECTED`]): the server does not serve the transport asked for
/// (RC on a server built with `accept_rc(false)`, or UD on one without a UD side).
pub const FLAG_TRANSPORT_OFF: u16 = 8;
/// `UdHello::flags` bit: the server accepts RC connections too.
pub const UD_ACCEPTS_RC: u32 = 1;

/// The UD part of a handshake (after a `Hello` with [`FLAG_UD`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdHello {
    /// Session id the server assigned (0 from the client).
    pub session: u32,
    /// Q_Key of the sender's UD QP.
    pub qkey: u32,
    /// [`UD_ACCEPTS_RC`].
    pub flags: u32,
}

impl UdHello {
    /// Encoded size.
    pub const WIRE_LEN: usize = 12;

    /// Encodes.
    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0u8; Self::WIRE_LEN];
        b[0..4].copy_from_slice(&self.session.to_be_bytes());
        b[4..8].copy_from_slice(&self.qkey.to_be_bytes());
        b[8..12].copy_from_slice(&self.flags.to_be_bytes());
        b
    }

    /// Decodes.
    pub fn from_bytes(b: &[u8; Self::WIRE_LEN]) -> UdHello {
        let w = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        UdHello {
            session: w(0),
            qkey: w(4),
            flags: w(8),
        }
    }

    /// Whether the server accepts RC connections too.
    pub fn accepts_rc(&self) -> bool {
        self.flags & UD_ACCEPTS_RC != 0
    }
}

/// One side's half of the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Flags ([`FLAG_REJECTED`]).
    pub flags: u16,
    /// The sender's QP.
    pub endpoint: QpEndpoint,
    /// Frame (slot) size in bytes.
    pub slot_size: u32,
    /// Credits asked for (client) or granted (server).
    pub credits: u32,
    /// Largest message body the sender accepts.
    pub max_message: u64,
}

impl Hello {
    /// Encoded size.
    pub const WIRE_LEN: usize = 8 + QpEndpoint::WIRE_LEN + 4 + 4 + 8;

    /// Encodes.
    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0u8; Self::WIRE_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_be_bytes());
        b[6..8].copy_from_slice(&self.flags.to_be_bytes());
        b[8..34].copy_from_slice(&self.endpoint.to_bytes());
        b[34..38].copy_from_slice(&self.slot_size.to_be_bytes());
        b[38..42].copy_from_slice(&self.credits.to_be_bytes());
        b[42..50].copy_from_slice(&self.max_message.to_be_bytes());
        b
    }

    /// Decodes, refusing another magic or version.
    pub fn from_bytes(b: &[u8; Self::WIRE_LEN]) -> io::Result<Hello> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        if b[0..4] != MAGIC {
            return Err(bad("not an rdma-rpc peer (bad handshake magic)".into()));
        }
        let version = u16::from_be_bytes([b[4], b[5]]);
        if version != VERSION {
            return Err(bad(format!(
                "peer speaks protocol version {version}, this side {VERSION}"
            )));
        }
        let endpoint = QpEndpoint::from_bytes(&b[8..34]).map_err(|e| bad(e.to_string()))?;
        Ok(Hello {
            flags: u16::from_be_bytes([b[6], b[7]]),
            endpoint,
            slot_size: u32::from_be_bytes(b[34..38].try_into().expect("4 bytes")),
            credits: u32::from_be_bytes(b[38..42].try_into().expect("4 bytes")),
            max_message: u64::from_be_bytes(b[42..50].try_into().expect("8 bytes")),
        })
    }

    /// Whether the server refused.
    pub fn rejected(&self) -> bool {
        self.flags & FLAG_REJECTED != 0
    }

    /// Whether this is a UD session's hello (a [`UdHello`] follows it).
    pub fn is_ud(&self) -> bool {
        self.flags & FLAG_UD != 0
    }
}

/// Writes the UD part that follows a `Hello` with [`FLAG_UD`].
pub async fn send_ud<S: AsyncWrite + Unpin>(s: &mut S, u: &UdHello) -> io::Result<()> {
    s.write_all(&u.to_bytes()).await?;
    s.flush().await
}

/// Reads the UD part that follows a `Hello` with [`FLAG_UD`].
pub async fn recv_ud<S: AsyncRead + Unpin>(s: &mut S) -> io::Result<UdHello> {
    let mut b = [0u8; UdHello::WIRE_LEN];
    s.read_exact(&mut b).await?;
    Ok(UdHello::from_bytes(&b))
}

/// Writes a hello.
pub async fn send<S: AsyncWrite + Unpin>(s: &mut S, h: &Hello) -> io::Result<()> {
    s.write_all(&h.to_bytes()).await?;
    s.flush().await
}

/// Reads and checks a hello.
pub async fn recv<S: AsyncRead + Unpin>(s: &mut S) -> io::Result<Hello> {
    let mut b = [0u8; Hello::WIRE_LEN];
    s.read_exact(&mut b).await?;
    Hello::from_bytes(&b)
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

    #[test]
    fn hello_round_trips_and_refuses_strangers() {
        let h = Hello {
            flags: FLAG_REJECTED,
            endpoint: QpEndpoint {
                lid: 1,
                qpn: 2,
                psn: 3,
                gid: Gid([7; 16]),
            },
            slot_size: 8192,
            credits: 64,
            max_message: 64 << 20,
        };
        let b = h.to_bytes();
        assert_eq!(Hello::from_bytes(&b).unwrap(), h);
        assert!(h.rejected());
        let mut other = b;
        other[5] = 9;
        assert!(Hello::from_bytes(&other).is_err());
        other = b;
        other[0] = b'X';
        assert!(Hello::from_bytes(&other).is_err());
    }

    #[test]
    fn ud_hello_round_trips() {
        let u = UdHello {
            session: 0xdead_beef,
            qkey: 0x1111_2222,
            flags: UD_ACCEPTS_RC,
        };
        assert_eq!(UdHello::from_bytes(&u.to_bytes()), u);
        assert!(u.accepts_rc());
    }
}
