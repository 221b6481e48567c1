//! A connected client's liveness channel, as the server serves it: answering its
//! PINGs, pinging it by the server's keepalive, and sending GOAWAY when the server
//! drains or the connection reaches its maximum age, until the client goes, stops
//! answering, or the server stops.

use std::future::Future;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::handshake::liveness::{Event, Keepalive, Liveness};
use crate::transport::jitter::Jitter;

/// How the server keeps every client's liveness channel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveSettings {
    /// PINGs to each client (`None`: none).
    pub(crate) keepalive: Option<Keepalive>,
    /// `Server::max_connection_age`: GOAWAY after this long (±10 %).
    pub(crate) max_age: Option<Duration>,
    /// `Server::max_connection_age_grace`: how long after that GOAWAY the
    /// connection may stay open before the server closes it (`None`: until the
    /// client closes it).
    pub(crate) age_grace: Option<Duration>,
}

/// A connection's age spreads by this fraction, gRPC's (proposal A9): connections
/// opened together do not all retire, and redial, at once.
const AGE_JITTER: f64 = 0.1;

/// Completes when a connection accepted now reaches `max_age` (jittered); never
/// without one.
async fn aged(max_age: Option<Duration>, salt: u64) {
    match max_age {
        Some(age) => tokio::time::sleep(Jitter::new(salt).spread(age, AGE_JITTER)).await,
        None => std::future::pending().await,
    }
}

/// Serves `tcp` (the handshake connection, after the handshake) until the client
/// closes it or misses a keepalive, or `stop` completes; sends GOAWAY once `goaway`
/// completes or the connection reaches its maximum age. After GOAWAY the client
/// starts no call here and closes the connection once its calls are answered, as
/// an HTTP/2 client does: calls in flight are cut short by the age only with a
/// grace period, when it ends.
pub(crate) async fn serve_liveness(
    tcp: TcpStream,
    live: LiveSettings,
    goaway: impl Future<Output = ()>,
    stop: impl Future<Output = ()>,
) {
    enum Step {
        Peer(Event),
        GoAway,
        Aged,
        GraceOver,
        Stop,
    }
    let peer = tcp.peer_addr().ok();
    let old = aged(live.max_age, peer.map_or(0, |p| u64::from(p.port())));
    let (rd, wr) = tcp.into_split();
    let mut channel = Liveness::new(rd, wr, live.keepalive);
    tokio::pin!(goaway, stop, old);
    let mut told = false;
    let mut grace_end: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        let step = tokio::select! {
            e = channel.next() => Step::Peer(e),
            () = &mut goaway, if !told => Step::GoAway,
            () = &mut old, if !told => Step::Aged,
            () = async { grace_end.as_mut().expect("enabled").await }, if grace_end.is_some() => {
                Step::GraceOver
            }
            () = &mut stop => Step::Stop,
        };
        match step {
            Step::GoAway | Step::Aged => {
                told = true;
                if matches!(step, Step::Aged) {
                    tracing::debug!(?peer, "connection reached its maximum age; GOAWAY");
                    grace_end = live.age_grace.map(|g| Box::pin(tokio::time::sleep(g)));
                }
                // Best effort: a client that cannot hear it finds the connection
                // closed when the drain ends.
                let _ = channel.send_goaway().await;
            }
            Step::GraceOver => {
                tracing::debug!(?peer, "maximum age's grace period over; connection closed");
                return;
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
