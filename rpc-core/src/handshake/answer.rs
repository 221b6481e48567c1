//! The server's answer: a grant or a refusal, and its bytes.

use rpc_transport::DeviceCaps;

use super::{
    head, Capabilities, HandshakeError, Reader, Reject, Transport, KIND_GRANT, KIND_REFUSAL, MAGIC,
    VERSION,
};

/// `UdGrant` flags bit: the server accepts RC connections too.
const UD_ACCEPTS_RC: u32 = 1;

/// What a server grants an RC connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcGrant {
    /// Frames the client may have unanswered (receives reserved for it).
    pub credits: u32,
    /// Frame size both sides use.
    pub slot_size: u32,
    /// Largest message body the server accepts.
    pub max_message: u64,
    /// Features both sides offered.
    pub capabilities: Capabilities,
    /// The server's device's capabilities (`None`: not sent, an older server).
    pub device: Option<DeviceCaps>,
}

impl RcGrant {
    /// The answer that grants this (module docs: wire layout).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = head(KIND_GRANT, Transport::Rc.code());
        b.extend_from_slice(&self.capabilities.bits().to_be_bytes());
        b.extend_from_slice(&self.credits.to_be_bytes());
        b.extend_from_slice(&self.slot_size.to_be_bytes());
        b.extend_from_slice(&self.max_message.to_be_bytes());
        push_device(&mut b, self.device);
        b
    }
}

/// What a server grants a UD session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdGrant {
    /// Calls the client may have outstanding.
    pub window: u32,
    /// Largest datagram payload either side sends.
    pub datagram: u32,
    /// Largest message body the server accepts.
    pub max_message: u64,
    /// Q_Key of the server's UD QP.
    pub qkey: u32,
    /// The session id: `decide` leaves it 0, the caller sets the
    /// one its UD engine assigned before encoding.
    pub session: u32,
    /// Whether the server accepts RC connections too (a UD client sends calls too
    /// big for a datagram over one).
    pub accepts_rc: bool,
    /// Features both sides offered.
    pub capabilities: Capabilities,
    /// The server's device's capabilities (`None`: not sent, an older server).
    pub device: Option<DeviceCaps>,
}

impl UdGrant {
    /// The answer that grants this (module docs: wire layout).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = head(KIND_GRANT, Transport::Ud.code());
        b.extend_from_slice(&self.capabilities.bits().to_be_bytes());
        b.extend_from_slice(&self.window.to_be_bytes());
        b.extend_from_slice(&self.datagram.to_be_bytes());
        b.extend_from_slice(&self.max_message.to_be_bytes());
        b.extend_from_slice(&self.qkey.to_be_bytes());
        b.extend_from_slice(&self.session.to_be_bytes());
        let flags = if self.accepts_rc { UD_ACCEPTS_RC } else { 0 };
        b.extend_from_slice(&flags.to_be_bytes());
        push_device(&mut b, self.device);
        b
    }
}

/// Appends the device word, when there is one (after every other field: an older
/// client ignores it).
fn push_device(b: &mut Vec<u8>, device: Option<DeviceCaps>) {
    if let Some(d) = device {
        b.extend_from_slice(&d.to_bits().to_be_bytes());
    }
}

/// A server's answer, as a client reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// An RC connection is granted.
    Rc(RcGrant),
    /// A UD session is granted.
    Ud(UdGrant),
    /// Refused.
    Reject(Reject),
}

impl Answer {
    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Answer::Rc(g) => g.encode(),
            Answer::Ud(g) => g.encode(),
            Answer::Reject(r) => r.encode(),
        }
    }

    /// Decodes: a refusal of any version, a grant of this one. Bytes past the known
    /// fields are ignored. Never panics.
    pub fn decode(b: &[u8]) -> Result<Answer, HandshakeError> {
        let short =
            || HandshakeError::BadAnswer(format!("answer of {} bytes is truncated", b.len()));
        let mut r = Reader(b);
        if r.bytes::<4>() != Some(MAGIC) {
            return Err(HandshakeError::BadAnswer(
                "not an rdma-rpc peer (bad handshake magic)".into(),
            ));
        }
        let version = r.u16().ok_or_else(short)?;
        let kind = r.u8().ok_or_else(short)?;
        let transport = r.u8().ok_or_else(short)?;
        if kind == KIND_REFUSAL {
            let code = r.u16().ok_or_else(short)?;
            let detail = r.u32().ok_or_else(short)?;
            return Ok(Answer::Reject(Reject::from_wire(code, detail, version)));
        }
        if kind != KIND_GRANT {
            return Err(HandshakeError::BadAnswer(format!(
                "the server's answer is of unknown kind {kind}"
            )));
        }
        if version != VERSION {
            return Err(HandshakeError::BadAnswer(format!(
                "the server granted in protocol version {version}, this client speaks {VERSION}"
            )));
        }
        let capabilities = Capabilities::from_bits(r.u64().ok_or_else(short)?);
        match Transport::from_code(transport) {
            Some(Transport::Rc) => Ok(Answer::Rc(RcGrant {
                credits: r.u32().ok_or_else(short)?,
                slot_size: r.u32().ok_or_else(short)?,
                max_message: r.u64().ok_or_else(short)?,
                capabilities,
                device: r.u64().map(DeviceCaps::from_bits),
            })),
            Some(Transport::Ud) => Ok(Answer::Ud(UdGrant {
                window: r.u32().ok_or_else(short)?,
                datagram: r.u32().ok_or_else(short)?,
                max_message: r.u64().ok_or_else(short)?,
                qkey: r.u32().ok_or_else(short)?,
                session: r.u32().ok_or_else(short)?,
                accepts_rc: r.u32().ok_or_else(short)? & UD_ACCEPTS_RC != 0,
                capabilities,
                device: r.u64().map(DeviceCaps::from_bits),
            })),
            None => Err(HandshakeError::BadAnswer(format!(
                "the server granted unknown transport {transport}"
            ))),
        }
    }
}
