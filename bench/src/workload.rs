//! The call shapes a run measures: unary echo, upload, and the streaming workloads.

use std::fmt;

use crate::system::System;

/// One workload (`--workloads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum Workload {
    /// One echo call after another per caller.
    #[value(name = "unary")]
    Unary,
    /// One server stream per caller, read as fast as it comes: messages/s and MB/s.
    #[value(name = "server_stream")]
    ServerStream,
    /// One client stream per caller, written as fast as the server takes it:
    /// messages/s and MB/s.
    #[value(name = "client_stream")]
    ClientStream,
    /// One bidirectional stream: send one message, read its echo, repeat.
    #[value(name = "bidi_pingpong")]
    BidiPingpong,
    /// One call after another per caller, the payload one way: the request carries
    /// it, the reply only its length (an upload; what perftest's `ib_read_bw` moves).
    #[value(name = "upload")]
    Upload,
}

impl Workload {
    /// The name on the command line, in tables and in JSON.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::Unary => "unary",
            Workload::ServerStream => "server_stream",
            Workload::ClientStream => "client_stream",
            Workload::BidiPingpong => "bidi_pingpong",
            Workload::Upload => "upload",
        }
    }

    /// Whether this workload streams (and so runs only on systems that stream).
    pub(crate) fn is_streaming(self) -> bool {
        matches!(
            self,
            Workload::ServerStream | Workload::ClientStream | Workload::BidiPingpong
        )
    }

    /// Whether `system` can run this workload: the raw TCP loops have no streams
    /// and only echo, rdma-rpc carries streams over RC only (a UD channel opens RC
    /// for them), and tonic-uds is a unary baseline (tonic streams on TCP stand for
    /// tonic).
    pub(crate) fn runs_on(self, system: System) -> bool {
        match self {
            Workload::Unary => true,
            Workload::Upload => !matches!(system, System::Tcp | System::TcpSpin),
            Workload::ServerStream | Workload::ClientStream | Workload::BidiPingpong => {
                matches!(system, System::RdmaRpc | System::Tonic)
            }
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
