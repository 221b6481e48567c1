//! tonic over a Unix domain socket: the same echo server and client as `tonic`,
//! carried by a local socket instead of TCP loopback (no TCP/IP stack, no Nagle or
//! checksums), the fairest same-host tonic.
//!
//! The run addresses every server by a TCP port, so this one also binds one and keeps
//! it open: the port names the socket's directory, which makes the path unique on the
//! host for as long as the server runs.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tonic::transport::{Channel, Endpoint, Uri};

use super::tonic::{callers, serve_incoming, Caller};

/// The socket of the server whose placeholder TCP listener is on `addr`.
pub(crate) fn socket_path(addr: SocketAddr) -> PathBuf {
    std::env::temp_dir()
        .join(format!("rpc-bench-tonic-uds-{}", addr.port()))
        .join("echo.sock")
}

pub(crate) async fn connect(path: &str, concurrency: usize) -> Result<Vec<Caller>, String> {
    Ok(callers(channel(path).await?, concurrency))
}

/// One HTTP/2 connection over the socket at `path`.
pub(super) async fn channel(path: &str) -> Result<Channel, String> {
    let path = PathBuf::from(path);
    let connector = tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
    });
    // The URI only fills HTTP/2's :authority; the connector decides where to go.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(connector)
        .await
        .map_err(|e| format!("{e}: {:?}", std::error::Error::source(&e)))
}

pub(crate) async fn serve(
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let path = socket_path(addr);
    let dir = path.parent().expect("the socket path has a directory");
    // A directory left by a server killed on this port earlier is stale: ours holds it now.
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let unix = UnixListener::bind(&path).map_err(|e| format!("binding {}: {e}", path.display()))?;
    let incoming = futures_util::stream::unfold(unix, |l| async {
        let next = l.accept().await.map(|(s, _)| s);
        Some((next, l))
    });
    let served = serve_incoming(Box::pin(incoming), stop).await;
    let _ = std::fs::remove_dir_all(dir);
    drop(listener);
    served
}
