//! A connected client's liveness channel, as the server serves it: answering its
//! PINGs, pinging it by the server's keepalive, and sending GOAWAY when the server
//! drains, until the client goes, stops answering, or the server stops.

use std::future::Future;

use tokio::net::TcpStream;

use crate::handshake::liveness::{Event, Keepalive, Liveness};

/// Serves `tcp` (the handshake connection, after the handshake) until the client
/// closes it or misses a keepalive, or `stop` completes; sends GOAWAY once `goaway`
/// completes.
pub(crate) async fn serve_liveness(
    tcp: TcpStream,
    keepalive: Option<Keepalive>,
    goaway: impl Future<Output = ()>,
    stop: impl Future<Output = ()>,
) {
    enum Step {
        Peer(Event),
        GoAway,
        Stop,
    }
    let peer = tcp.peer_addr().ok();
    let (rd, wr) = tcp.into_split();
    let mut live = Liveness::new(rd, wr, keepalive);
    tokio::pin!(goaway, stop);
    let mut told = false;
    loop {
        let step = tokio::select! {
            e = live.next() => Step::Peer(e),
            () = &mut goaway, if !told => Step::GoAway,
            () = &mut stop => Step::Stop,
        };
        match step {
            Step::GoAway => {
                told = true;
                // Best effort: a client that cannot hear it finds the connection
                // closed when the drain ends.
                let _ = live.send_goaway().await;
            }
            // A client sends no GOAWAY; ignore one.
            Step::Peer(Event::GoAway) => {}
            Step::Peer(Event::TimedOut) => {
                tracing::info!(
                    ?peer,
                    "client missed a keepalive ping; closing its connection"
                );
                return;
            }
            Step::Peer(Event::Closed) | Step::Stop => return,
        }
    }
}
