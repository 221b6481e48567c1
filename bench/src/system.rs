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
    /// rdma-rpc over RC with the soft provider's same-host link forced to TCP, as
    /// between hosts (both ends' devices): the baseline of the shared-memory link.
    /// Soft provider only; run only when asked for.
    #[value(name = "rdma-rpc-tcp")]
    RdmaRpcTcp,
    /// rdma-rpc's UD transport (`rdma+ud://`) against the same server: small
    /// payloads only; run only when asked for (`--systems rdma-rpc-ud` or `--ud`).
    #[value(name = "rdma-rpc-ud")]
    RdmaRpcUd,
    /// tonic over HTTP/2 on TCP loopback.
    #[value(name = "tonic")]
    Tonic,
    /// tonic over HTTP/2 on a Unix domain socket: the fair same-host tonic.
    #[value(name = "tonic-uds")]
    TonicUds,
    /// Length-prefixed request/response on plain TCP, one connection per call in
    /// flight, each side sleeping in the kernel until its socket is readable.
    #[value(name = "tcp")]
    Tcp,
    /// The same TCP loop busy-polling non-blocking sockets: the socket floor.
    #[value(name = "tcp-spin")]
    TcpSpin,
}

impl System {
    /// Every system, in the order tables list them.
    pub(crate) const ALL: [System; 7] = [
        System::RdmaRpc,
        System::RdmaRpcTcp,
        System::RdmaRpcUd,
        System::Tonic,
        System::TonicUds,
        System::Tcp,
        System::TcpSpin,
    ];

    /// The name used on the command line, in tables and in JSON.
    pub(crate) fn name(self) -> &'static str {
        match self {
            System::RdmaRpc => "rdma-rpc",
            System::RdmaRpcTcp => "rdma-rpc-tcp",
            System::RdmaRpcUd => "rdma-rpc-ud",
            System::Tonic => "tonic",
            System::TonicUds => "tonic-uds",
            System::Tcp => "tcp",
            System::TcpSpin => "tcp-spin",
        }
    }

    /// The system whose server process this one's clients talk to.
    pub(crate) fn server(self) -> System {
        match self {
            System::RdmaRpcUd => System::RdmaRpc,
            s => s,
        }
    }

    /// The address a client of this system connects to, given the TCP address its
    /// server printed (tonic-uds: the path of the socket that address names).
    pub(crate) fn url(self, addr: SocketAddr) -> String {
        match self {
            System::RdmaRpc | System::RdmaRpcTcp => format!("rdma://{addr}"),
            System::RdmaRpcUd => format!("rdma+ud://{addr}"),
            System::Tonic => format!("http://{addr}"),
            System::TonicUds => crate::systems::uds_socket_path(addr).display().to_string(),
            System::Tcp | System::TcpSpin => addr.to_string(),
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
