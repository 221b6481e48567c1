//! Why a server refuses a handshake.

use std::fmt;

use super::{head, KIND_REFUSAL, NO_UD};

/// Why a server refuses a client. Encoded as a reason code and one detail word; a
/// code this build does not know decodes as [`Reject::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reject {
    /// The hello is not rdma-rpc's (bad magic).
    NotRdmaRpc,
    /// The client speaks another protocol version.
    UnsupportedVersion {
        /// The client's version.
        client: u16,
        /// The server's.
        server: u16,
    },
    /// The hello is truncated, of an unknown transport, or asks for what cannot
    /// work (fewer than 2 credits, an empty window or datagram).
    Malformed,
    /// The server takes no RC connections (UD only).
    RcNotAccepted,
    /// The server serves no UD sessions.
    UdNotServed,
    /// The server's receive pool has no credits left for another connection.
    NoReceiveCredits,
    /// The server's limit of UD sessions is reached.
    SessionLimit {
        /// That limit.
        limit: u32,
    },
    /// The server's limit of RC connections is reached.
    ConnectionLimit {
        /// That limit.
        limit: u32,
    },
    /// The client's device has no immediate data and the server's shared receive
    /// pool frames with it (see [`super::device`]).
    NoImmediateData,
    /// The client asked for UD and the server's device has none (RC only): the
    /// client may connect over RC instead.
    NoUdDevice,
    /// The server's device has no immediate data and the client sent no device word:
    /// an older client, which cannot frame its immediates in the payload.
    ClientTooOldForHeaderFraming,
    /// The hello's RDMA address is not on the host the connection came from (soft
    /// provider: the server would dial it; see `handshake::check_soft_peer`).
    ForeignAddress,
    /// A reason this build does not know (from a newer server), by its code.
    Unknown(u16),
}

impl Reject {
    fn code_and_detail(self) -> (u16, u32) {
        match self {
            Reject::NotRdmaRpc => (1, 0),
            Reject::UnsupportedVersion { client, .. } => (2, u32::from(client)),
            Reject::Malformed => (3, 0),
            Reject::RcNotAccepted => (4, 0),
            Reject::UdNotServed => (5, 0),
            Reject::NoReceiveCredits => (6, 0),
            Reject::SessionLimit { limit } => (7, limit),
            Reject::ConnectionLimit { limit } => (8, limit),
            Reject::NoImmediateData => (9, 0),
            Reject::NoUdDevice => (10, 0),
            Reject::ClientTooOldForHeaderFraming => (11, 0),
            Reject::ForeignAddress => (12, 0),
            Reject::Unknown(code) => (code, 0),
        }
    }

    /// The reason `code` with `detail`, in an answer of protocol `version`.
    pub(super) fn from_wire(code: u16, detail: u32, version: u16) -> Reject {
        match code {
            1 => Reject::NotRdmaRpc,
            2 => Reject::UnsupportedVersion {
                client: detail as u16,
                server: version,
            },
            3 => Reject::Malformed,
            4 => Reject::RcNotAccepted,
            5 => Reject::UdNotServed,
            6 => Reject::NoReceiveCredits,
            7 => Reject::SessionLimit { limit: detail },
            8 => Reject::ConnectionLimit { limit: detail },
            9 => Reject::NoImmediateData,
            10 => Reject::NoUdDevice,
            11 => Reject::ClientTooOldForHeaderFraming,
            12 => Reject::ForeignAddress,
            c => Reject::Unknown(c),
        }
    }

    /// The answer that refuses for this reason (module docs: wire layout). Its
    /// version is the server's, as the layout of a refusal never changes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = head(KIND_REFUSAL, 0);
        if let Reject::UnsupportedVersion { server, .. } = self {
            b[4..6].copy_from_slice(&server.to_be_bytes());
        }
        let (code, detail) = self.code_and_detail();
        b.extend_from_slice(&code.to_be_bytes());
        b.extend_from_slice(&detail.to_be_bytes());
        b
    }

    /// The end of the client's message: what follows "server refused the
    /// connection" or "server refused the UD session".
    pub(super) fn client_text(&self) -> String {
        match self {
            Reject::NotRdmaRpc => ": it did not recognise this client's hello".into(),
            Reject::UnsupportedVersion { client, server } => format!(
                ": it speaks rdma-rpc protocol version {server}, this client version {client}"
            ),
            Reject::Malformed => ": it found this client's hello malformed".into(),
            Reject::RcNotAccepted => ": it does not accept RC connections (UD only)".into(),
            Reject::UdNotServed => " (it does not serve UD)".into(),
            Reject::NoReceiveCredits => " (no receive credits left)".into(),
            Reject::SessionLimit { limit } => {
                format!(": its limit of {limit} UD sessions is reached")
            }
            Reject::ConnectionLimit { limit } => {
                format!(": its limit of {limit} connections is reached (Server::max_connections)")
            }
            Reject::NoImmediateData => ": this client's device has no immediate data (iWARP), \
                 which the server's receive pool needs"
                .into(),
            Reject::NoUdDevice => format!(": the server's {NO_UD}"),
            Reject::ClientTooOldForHeaderFraming => ": the server's device has no immediate data \
                 and this client cannot frame without it"
                .into(),
            Reject::ForeignAddress => ": this client's RDMA address is not the address it \
                 connected from (soft provider)"
                .into(),
            Reject::Unknown(code) => format!(" (reason {code}, unknown to this client)"),
        }
    }
}

/// The server's view, for its logs.
impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reject::NotRdmaRpc => f.write_str("not an rdma-rpc peer (bad handshake magic)"),
            Reject::UnsupportedVersion { client, server } => write!(
                f,
                "client speaks rdma-rpc protocol version {client}, this server {server}"
            ),
            Reject::Malformed => f.write_str("malformed client hello"),
            Reject::RcNotAccepted => f.write_str("RC connections are not accepted (UD only)"),
            Reject::UdNotServed => f.write_str("UD sessions are not served"),
            Reject::NoReceiveCredits => {
                f.write_str("receive pool fully granted; connection refused")
            }
            Reject::SessionLimit { limit } => {
                write!(f, "the server's limit of {limit} UD sessions is reached")
            }
            Reject::ConnectionLimit { limit } => {
                write!(f, "the server's limit of {limit} connections is reached")
            }
            Reject::NoImmediateData => f.write_str(
                "the client's device has no immediate data, which this server's receive pool uses",
            ),
            Reject::NoUdDevice => write!(f, "UD sessions are not served: this server's {NO_UD}"),
            Reject::ClientTooOldForHeaderFraming => f.write_str(
                "this server's device has no immediate data and the client (an older build) \
                 cannot frame without it",
            ),
            Reject::ForeignAddress => f.write_str(
                "the hello names an RDMA address on another host than the connection's peer",
            ),
            Reject::Unknown(code) => write!(f, "refused for reason {code}"),
        }
    }
}

impl std::error::Error for Reject {}
