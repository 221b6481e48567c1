//! What every client connection starts with: a device, and the out-of-band TCP
//! connection that carries the handshake and then stays open for liveness.

use std::net::SocketAddr;
use std::sync::OnceLock;

use rpc_transport::msg;
use rpc_transport::Device;
use tokio::net::TcpStream;

use crate::transport::endpoint::Endpoint;
use crate::transport::Error;

/// The device client connections of this process share (one soft NIC or one verbs
/// context), opened on first use; or the one the endpoint names.
pub(crate) fn shared_device(ep: &Endpoint) -> rpc_transport::Result<Device> {
    static DEFAULT: OnceLock<Device> = OnceLock::new();
    if let Some(d) = &ep.settings.rdma_device {
        return Ok(d.clone());
    }
    let name = ep.settings.device.as_deref();
    if name.is_some() {
        return msg::open_device(name);
    }
    if let Some(d) = DEFAULT.get() {
        return Ok(d.clone());
    }
    let d = msg::open_device(None)?;
    Ok(DEFAULT.get_or_init(|| d).clone())
}

/// Resolves the endpoint's host and opens the handshake connection to it.
pub(super) async fn dial(ep: &Endpoint) -> Result<(TcpStream, SocketAddr), Error> {
    let addr = tokio::net::lookup_host((ep.host.as_str(), ep.port))
        .await?
        .next()
        .ok_or_else(|| Error::new(format!("{} resolves to nothing", ep.host)))?;
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    Ok((tcp, addr))
}
