//! The client's check of the server's answer.

use std::fmt;
use std::io;

use rpc_transport::msg::handshake::Stranger;

use super::{Answer, ClientHello, RcAsk, RcGrant, Reject, Transport, UdAsk, UdGrant, VERSION};
use crate::engine::MIN_FRAME;

/// Why a client's handshake failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The server refused.
    Refused {
        /// What was asked for.
        transport: Transport,
        /// Why.
        reason: Reject,
    },
    /// The answer is not rdma-rpc's, cannot be read, or grants what cannot work.
    BadAnswer(String),
    /// The server closed the connection before answering.
    Closed,
    /// The exchange failed (the connection broke).
    Io(String),
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Refused { transport, reason } => {
                let what = match transport {
                    Transport::Rc => "connection",
                    Transport::Ud => "UD session",
                };
                write!(f, "server refused the {what}{}", reason.client_text())
            }
            HandshakeError::BadAnswer(m) => f.write_str(m),
            HandshakeError::Closed => write!(
                f,
                "the server closed the connection during the handshake (not an rdma-rpc \
                 server, or one older than protocol version {VERSION})"
            ),
            HandshakeError::Io(m) => write!(f, "handshake failed: {m}"),
        }
    }
}

impl std::error::Error for HandshakeError {}

/// Failures of the exchange that carries the answer.
impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> HandshakeError {
        if Stranger::of(&e).is_some() {
            return HandshakeError::BadAnswer("not an rdma-rpc peer (bad handshake magic)".into());
        }
        match e.kind() {
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => HandshakeError::Closed,
            _ => HandshakeError::Io(e.to_string()),
        }
    }
}

fn bad(m: String) -> HandshakeError {
    HandshakeError::BadAnswer(m)
}

/// The server's `answer` to `hello` → what the connection uses: refused, unreadable,
/// or a grant with fewer than 2 credits, slots under the engine's minimum frame,
/// more credits than asked, or capabilities not offered, is an error.
pub fn check_rc(hello: &ClientHello<RcAsk>, answer: &[u8]) -> Result<RcGrant, HandshakeError> {
    let g = match Answer::decode(answer)? {
        Answer::Rc(g) => g,
        Answer::Ud(_) => return Err(bad("the server answered an RC hello with a UD grant".into())),
        Answer::Reject(reason) => {
            return Err(HandshakeError::Refused {
                transport: Transport::Rc,
                reason,
            })
        }
    };
    if g.credits < 2 || (g.slot_size as usize) < MIN_FRAME {
        return Err(bad(format!(
            "server offered {} credits of {}-byte slots",
            g.credits, g.slot_size
        )));
    }
    if g.credits > hello.ask.credits {
        return Err(bad(format!(
            "server granted {} credits, more than the {} asked",
            g.credits, hello.ask.credits
        )));
    }
    offered(hello.capabilities, g.capabilities)?;
    Ok(g)
}

/// The server's `answer` to `hello` → the session's parameters: refused,
/// unreadable, or a grant with an empty or larger window or datagram than asked, or
/// capabilities not offered, is an error.
pub fn check_ud(hello: &ClientHello<UdAsk>, answer: &[u8]) -> Result<UdGrant, HandshakeError> {
    let g = match Answer::decode(answer)? {
        Answer::Ud(g) => g,
        Answer::Rc(_) => return Err(bad("the server answered a UD hello with an RC grant".into())),
        Answer::Reject(reason) => {
            return Err(HandshakeError::Refused {
                transport: Transport::Ud,
                reason,
            })
        }
    };
    let ask = &hello.ask;
    if g.window == 0 || g.window > ask.window {
        return Err(bad(format!(
            "server granted a window of {} calls, asked {}",
            g.window, ask.window
        )));
    }
    if g.datagram == 0 || g.datagram > ask.datagram {
        return Err(bad(format!(
            "server granted {}-byte datagrams, this client receives at most {}",
            g.datagram, ask.datagram
        )));
    }
    offered(hello.capabilities, g.capabilities)?;
    Ok(g)
}

fn offered(
    offered: super::Capabilities,
    granted: super::Capabilities,
) -> Result<(), HandshakeError> {
    if offered.contains(granted) {
        return Ok(());
    }
    Err(bad(format!(
        "server granted capabilities {:#x}, this client offered {:#x}",
        granted.bits(),
        offered.bits()
    )))
}
