//! The systems compared, and how each is addressed.

use std::fmt;
use std::net::SocketAddr;

/// One RPC system under test. Adding one is a variant here, a client in
/// `systems/`, and (unless it shares another's server) a server there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum System {
    /// rdma-rpc over RC queue pairs (`rdma://`).
    #[value(name = "rdma-rpc")]
    RdmaRpc,
    /// rdma-rpc's UD transport (`rdma+ud://`) against the same server: small
    /// payloads only; run only when asked for (`--systems rdma-rpc-ud` or `--ud`).
    #[value(name = "rdma-rpc-ud")]
    RdmaRpcUd,
    /// tonic over HTTP/2 on TCP loopback.
    #[value(name = "tonic")]
    Tonic,
    /// The floor: length-prefixed request/response on plain TCP, one connection per
    /// call in flight.
    #[value(name = "tcp")]
    Tcp,
}

impl System {
    /// Every system, in the order tables list them.
    pub(crate) const ALL: [System; 4] = [
        System::RdmaRpc,
        System::RdmaRpcUd,
        System::Tonic,
        System::Tcp,
    ];

    /// The name used on the command line, in tables and in JSON.
    pub(crate) fn name(self) -> &'static str {
        match self {
            System::RdmaRpc => "rdma-rpc",
            System::RdmaRpcUd => "rdma-rpc-ud",
            System::Tonic => "tonic",
            System::Tcp => "tcp",
        }
    }

    /// The system whose server process this one's clients talk to.
    pub(crate) fn server(self) -> System {
        match self {
            System::RdmaRpcUd => System::RdmaRpc,
            s => s,
        }
    }

    /// The address a client of this system connects to.
    pub(crate) fn url(self, addr: SocketAddr) -> String {
        match self {
            System::RdmaRpc => format!("rdma://{addr}"),
            System::RdmaRpcUd => format!("rdma+ud://{addr}"),
            System::Tonic => format!("http://{addr}"),
            System::Tcp => addr.to_string(),
        }
    }

    /// Whether this system carries `payload` bytes (UD: one datagram, up to the MTU).
    pub(crate) fn carries(self, payload: usize) -> bool {
        match self {
            System::RdmaRpcUd => payload <= 1024,
            _ => true,
        }
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
