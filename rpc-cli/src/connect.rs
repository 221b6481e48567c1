//! The server's address, and connections to it.

use rpc_core::transport::{Channel, Endpoint};

use crate::args::Target;
use crate::fail::{local, Fail};

/// Where a command connects, connecting only if the command needs the server.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) addr: String,
    endpoint: Endpoint,
    channel: tokio::sync::OnceCell<Channel>,
}

impl Connection {
    /// Checks the address (`rdma://host:port` or `rdma+ud://host:port`).
    pub(crate) fn new(target: &Target) -> Result<Connection, Fail> {
        let endpoint = Endpoint::from_shared(target.addr.clone())
            .map_err(|e| {
                local(format!(
                    "{:?} is not an address (rdma://host:port or rdma+ud://host:port): {}",
                    target.addr,
                    why(&e)
                ))
            })?
            .connect_timeout(target.connect_timeout);
        Ok(Connection {
            addr: target.addr.clone(),
            endpoint,
            channel: tokio::sync::OnceCell::new(),
        })
    }

    /// The command's connection, made on first need.
    pub(crate) async fn channel(&self) -> Result<Channel, Fail> {
        self.channel
            .get_or_try_init(|| self.connect())
            .await
            .cloned()
    }

    /// A new connection of its own.
    pub(crate) async fn connect(&self) -> Result<Channel, Fail> {
        self.endpoint
            .connect()
            .await
            .map_err(|e| local(format!("cannot connect to {}: {}", self.addr, why(&e))))
    }
}

/// What went wrong: a transport error shows only its kind, as tonic's; the reason
/// is its source.
fn why(e: &rpc_core::transport::Error) -> String {
    std::error::Error::source(e).map_or_else(|| e.to_string(), ToString::to_string)
}
