//! The client's hello: what it offers and asks for, and its bytes.

use rpc_transport::DeviceCaps;

use super::{head, Capabilities, Reader, Reject, Transport, KIND_HELLO, MAGIC, VERSION};

/// What a client asks for an RC connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcAsk {
    /// Frames it wants to have unanswered at once (at least 2: the engine keeps one
    /// for CANCEL frames).
    pub credits: u32,
    /// Frame size it would like (the server's wins).
    pub slot_size: u32,
    /// Largest message body it accepts.
    pub max_message: u64,
}

/// What a client asks for a UD session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdAsk {
    /// Calls it wants outstanding at once (at least 1).
    pub window: u32,
    /// Largest datagram payload it can receive.
    pub datagram: u32,
    /// Largest message body it accepts.
    pub max_message: u64,
    /// Q_Key of its UD QP.
    pub qkey: u32,
}

/// Either ask, as a server reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// An RC connection.
    Rc(RcAsk),
    /// A UD session.
    Ud(UdAsk),
}

impl From<RcAsk> for Ask {
    fn from(a: RcAsk) -> Ask {
        Ask::Rc(a)
    }
}

impl From<UdAsk> for Ask {
    fn from(a: UdAsk) -> Ask {
        Ask::Ud(a)
    }
}

impl Ask {
    /// The transport asked for.
    pub fn transport(&self) -> Transport {
        match self {
            Ask::Rc(_) => Transport::Rc,
            Ask::Ud(_) => Transport::Ud,
        }
    }
}

/// The client's half of the handshake, in this protocol [`VERSION`]. A client
/// builds a `ClientHello<RcAsk>` or `ClientHello<UdAsk>` and checks the answer
/// against it; a server decodes a `ClientHello<Ask>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientHello<A = Ask> {
    /// Features the client offers.
    pub capabilities: Capabilities,
    /// What it asks for.
    pub ask: A,
    /// Its device's capabilities (`None`: not sent, an older client; see
    /// [`super::device`]).
    pub device: Option<DeviceCaps>,
}

impl<A> ClientHello<A> {
    /// A hello offering every capability this build supports.
    pub fn new(ask: A) -> ClientHello<A> {
        ClientHello {
            capabilities: Capabilities::SUPPORTED,
            ask,
            device: None,
        }
    }

    /// The same hello, telling the server its device's capabilities.
    pub fn with_device(mut self, caps: DeviceCaps) -> ClientHello<A> {
        self.device = Some(caps);
        self
    }
}

impl<A: Into<Ask> + Copy> ClientHello<A> {
    /// Encodes (module docs: wire layout).
    pub fn encode(&self) -> Vec<u8> {
        let ask: Ask = self.ask.into();
        let mut b = head(KIND_HELLO, ask.transport().code());
        b.extend_from_slice(&self.capabilities.bits().to_be_bytes());
        match ask {
            Ask::Rc(a) => {
                b.extend_from_slice(&a.credits.to_be_bytes());
                b.extend_from_slice(&a.slot_size.to_be_bytes());
                b.extend_from_slice(&a.max_message.to_be_bytes());
            }
            Ask::Ud(a) => {
                b.extend_from_slice(&a.window.to_be_bytes());
                b.extend_from_slice(&a.datagram.to_be_bytes());
                b.extend_from_slice(&a.max_message.to_be_bytes());
                b.extend_from_slice(&a.qkey.to_be_bytes());
            }
        }
        if let Some(d) = &self.device {
            b.extend_from_slice(&d.to_bits().to_be_bytes());
        }
        b
    }
}

impl ClientHello<Ask> {
    /// Decodes a hello, refusing another magic, another version, or anything short
    /// or unknown. Bytes past the known fields are ignored. Never panics.
    pub fn decode(b: &[u8]) -> Result<ClientHello<Ask>, Reject> {
        let mut r = Reader(b);
        if r.bytes::<4>() != Some(MAGIC) {
            return Err(Reject::NotRdmaRpc);
        }
        let version = r.u16().ok_or(Reject::Malformed)?;
        if version != VERSION {
            return Err(Reject::UnsupportedVersion {
                client: version,
                server: VERSION,
            });
        }
        if r.u8() != Some(KIND_HELLO) {
            return Err(Reject::Malformed);
        }
        let transport = r.u8().and_then(Transport::from_code);
        let capabilities = Capabilities::from_bits(r.u64().ok_or(Reject::Malformed)?);
        let ask = match transport.ok_or(Reject::Malformed)? {
            Transport::Rc => Ask::Rc(RcAsk {
                credits: r.u32().ok_or(Reject::Malformed)?,
                slot_size: r.u32().ok_or(Reject::Malformed)?,
                max_message: r.u64().ok_or(Reject::Malformed)?,
            }),
            Transport::Ud => Ask::Ud(UdAsk {
                window: r.u32().ok_or(Reject::Malformed)?,
                datagram: r.u32().ok_or(Reject::Malformed)?,
                max_message: r.u64().ok_or(Reject::Malformed)?,
                qkey: r.u32().ok_or(Reject::Malformed)?,
            }),
        };
        // Optional: an older client ends its hello before it.
        let device = r.u64().map(DeviceCaps::from_bits);
        Ok(ClientHello {
            capabilities,
            ask,
            device,
        })
    }
}
