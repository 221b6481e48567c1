//! What every client connection starts with: a device, and the out-of-band TCP
//! connection that carries the handshake and then stays open for liveness.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use rpc_transport::msg;
use rpc_transport::{Device, Error as DeviceError};
use tokio::net::TcpStream;

use crate::transport::endpoint::Endpoint;
use crate::transport::Error;

/// The device client connections of this process share, or the one the endpoint
/// names. The default one (one soft NIC or the verbs context) is opened on first use
/// for each local address handshakes leave from (`tcp`'s): a soft device there is
/// reachable wherever the server is, on this host (127.0.0.1) or across a network.
pub(crate) fn shared_device(ep: &Endpoint, tcp: &TcpStream) -> rpc_transport::Result<Device> {
    static DEFAULT: Mutex<Vec<(IpAddr, Device)>> = Mutex::new(Vec::new());
    if let Some(d) = &ep.settings.rdma_device {
        return Ok(d.clone());
    }
    let name = ep.settings.device.as_deref();
    if name.is_some() {
        return msg::open_device(name);
    }
    let local = tcp
        .local_addr()
        .map_err(|e| DeviceError::verb("getsockname", e))?
        .ip();
    // A handful of entries (one per local address in use): a scan is enough.
    let mut devs = DEFAULT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, d)) = devs.iter().find(|(ip, _)| *ip == local) {
        return Ok(d.clone());
    }
    let d = Device::open_default_on(local)?;
    devs.push((local, d.clone()));
    Ok(d)
}

/// Resolves the endpoint's host and opens the handshake connection to it.
pub(super) async fn dial(ep: &Endpoint) -> Result<(TcpStream, SocketAddr), Error> {
    ep.check_uri()?;
    let addr = tokio::net::lookup_host((ep.host.as_str(), ep.port))
        .await?
        .next()
        .ok_or_else(|| Error::new(format!("{} resolves to nothing", ep.host)))?;
    let tcp = match ep.settings.local_address {
        None => TcpStream::connect(addr).await?,
        Some(local) => {
            let socket = match addr {
                SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
            };
            socket.bind(SocketAddr::new(local, 0))?;
            socket.connect(addr).await?
        }
    };
    ep.settings.tcp.apply(&tcp)?;
    Ok((tcp, addr))
}
