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

/// Where a connection is in its retirement by age: one timer serves both stages.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retire {
    /// The timer runs to the connection's (jittered) maximum age.
    Aging,
    /// GOAWAY was sent for its age; the timer runs to the end of the grace.
    Grace,
    /// No maximum age, or the age passed with no grace: the timer is not polled.
    Off,
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
    let (mut retire, age) = match live.max_age {
        Some(age) => {
            let salt = peer.map_or(0, |p| u64::from(p.port()));
            (Retire::Aging, Jitter::new(salt).spread(age, AGE_JITTER))
        }
        None => (Retire::Off, Duration::ZERO),
    };
    let timer = tokio::time::sleep(age);
    let (rd, wr) = tcp.into_split();
    let mut channel = Liveness::new(rd, wr, live.keepalive);
    tokio::pin!(goaway, stop, timer);
    let mut told = false;
    loop {
        // A GOAWAY for the server's drain ends the aging (the drain has its grace).
        let timed = retire == Retire::Grace || (retire == Retire::Aging && !told);
        let step = tokio::select! {
            e = channel.next() => Step::Peer(e),
            () = &mut goaway, if !told => Step::GoAway,
            () = &mut timer, if timed => match retire {
                Retire::Grace => Step::GraceOver,
                _ => Step::Aged,
            },
            () = &mut stop => Step::Stop,
        };
        match step {
            Step::GoAway | Step::Aged => {
                told = true;
                if matches!(step, Step::Aged) {
                    tracing::debug!(?peer, "connection reached its maximum age; GOAWAY");
                    retire = match live.age_grace {
                        Some(grace) => {
                            timer.as_mut().reset(tokio::time::Instant::now() + grace);
                            Retire::Grace
                        }
                        None => Retire::Off,
                    };
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
