//! After the handshake: the out-of-band TCP connection stays open as the liveness
//! channel. Its closing tells either side that the other is gone; besides that, it
//! carries one-byte notices:
//!
//! | byte | notice | from | meaning |
//! | --- | --- | --- | --- |
//! | `0x47` (`G`) | GOAWAY | server | the server is shutting down: start no new call on this connection; calls in flight are answered, then the client closes it |
//! | `0x50` (`P`) | PING | either | answer with PONG |
//! | `0x70` (`p`) | PONG | either | the answer to a PING |
//!
//! Keepalive: a side that wants to know its peer is alive sends PING every
//! `interval` and declares the peer dead when no byte has come back `timeout` after
//! a PING. A peer process that hangs (stopped, deadlocked) is found so, where TCP's
//! own keepalive, answered by the peer's kernel, finds only a vanished host. Bytes a
//! side does not know are ignored (later notices are additive).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// The GOAWAY notice.
pub const GOAWAY: u8 = b'G';
/// The PING notice.
pub const PING: u8 = b'P';
/// The PONG notice.
pub const PONG: u8 = b'p';

/// Keepalive settings: PING every `interval`, the peer is dead when nothing came
/// back `timeout` after one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Time between PINGs.
    pub interval: Duration,
    /// How long a PING may go unanswered.
    pub timeout: Duration,
}

/// What the liveness channel reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The server said GOAWAY.
    GoAway,
    /// The peer closed the connection (or it failed): the peer is gone.
    Closed,
    /// A PING went unanswered for the keepalive timeout: the peer is hung or gone.
    TimedOut,
}

/// One side of a liveness channel: answers PINGs, sends its own by its keepalive,
/// and reports what a driver acts on. Its methods are cancel-safe (a `select!` may
/// drop `next` and call it again).
pub struct Liveness<R, W> {
    rd: R,
    wr: W,
    keepalive: Option<Keepalive>,
    next_ping: Instant,
    /// When the PING that is still unanswered was sent.
    ping_sent: Option<Instant>,
    /// Whether the side has nothing in flight, when it pings only while busy.
    idle: Option<Box<dyn Fn() -> bool + Send>>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Liveness<R, W> {
    /// A liveness channel over `rd`/`wr` with an optional keepalive.
    pub fn new(rd: R, wr: W, keepalive: Option<Keepalive>) -> Self {
        let next_ping = Instant::now() + keepalive.map_or(Duration::ZERO, |k| k.interval);
        Liveness {
            rd,
            wr,
            keepalive,
            next_ping,
            ping_sent: None,
            idle: None,
        }
    }

    /// Sends no PING while `idle` says so (tonic's `keep_alive_while_idle(false)`):
    /// a ping that falls due then is put off by an interval.
    #[must_use]
    pub fn without_idle_pings(mut self, idle: impl Fn() -> bool + Send + 'static) -> Self {
        self.idle = Some(Box::new(idle));
        self
    }

    /// Waits for the next event.
    pub async fn next(&mut self) -> Event {
        let mut b = [0u8; 64];
        loop {
            let timer = match (self.keepalive, self.ping_sent) {
                (None, _) => None,
                (Some(k), Some(sent)) => Some(sent + k.timeout),
                (Some(_), None) => Some(self.next_ping),
            };
            let read = tokio::select! {
                r = self.rd.read(&mut b) => r,
                () = sleep_until(timer) => {
                    if self.ping_sent.is_some() {
                        return Event::TimedOut;
                    }
                    if let (Some(k), Some(idle)) = (self.keepalive, &self.idle) {
                        if idle() {
                            self.next_ping = Instant::now() + k.interval;
                            continue;
                        }
                    }
                    if self.wr.write_all(&[PING]).await.is_err() {
                        return Event::Closed;
                    }
                    self.ping_sent = Some(Instant::now());
                    continue;
                }
            };
            let n = match read {
                Ok(0) | Err(_) => return Event::Closed,
                Ok(n) => n,
            };
            // Any byte from the peer shows it alive.
            if let (Some(k), Some(_)) = (self.keepalive, self.ping_sent.take()) {
                self.next_ping = Instant::now() + k.interval;
            }
            let pings = b[..n].iter().filter(|&&c| c == PING).count();
            if pings > 0 && self.wr.write_all(&vec![PONG; pings]).await.is_err() {
                return Event::Closed;
            }
            if b[..n].contains(&GOAWAY) {
                return Event::GoAway;
            }
        }
    }

    /// Sends GOAWAY (a server shutting down).
    pub async fn send_goaway(&mut self) -> std::io::Result<()> {
        self.wr.write_all(&[GOAWAY]).await?;
        self.wr.flush().await
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn goaway_then_close_reads_as_such_and_unknown_bytes_are_ignored() {
        let (a, b) = tokio::io::duplex(64);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let mut server = Liveness::new(ar, aw, None);
        let mut client = Liveness::new(br, bw, None);
        server.wr.write_all(b"xy").await.unwrap();
        server.send_goaway().await.unwrap();
        assert_eq!(client.next().await, Event::GoAway);
        drop(server);
        assert_eq!(client.next().await, Event::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_ping_answered_keeps_the_peer_alive_and_an_unanswered_one_times_out() {
        let k = Keepalive {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
        };
        let (a, b) = tokio::io::duplex(64);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let mut pinger = Liveness::new(ar, aw, Some(k));
        let mut answerer = Liveness::new(br, bw, None);
        // The answerer runs for 35 s of (paused) time: three PINGs, all answered.
        let t0 = Instant::now();
        tokio::select! {
            e = pinger.next() => panic!("pinger reported {e:?} while answered"),
            e = answerer.next() => panic!("answerer reported {e:?}"),
            () = tokio::time::sleep(Duration::from_secs(35)) => {}
        }
        // Now nobody answers: 10 s to the next PING at most, then 2 s.
        let e = pinger.next().await;
        assert_eq!(e, Event::TimedOut);
        let waited = t0.elapsed() - Duration::from_secs(35);
        assert!(waited <= Duration::from_secs(12), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn without_idle_pings_an_idle_side_sends_none_and_a_busy_one_does() {
        let k = Keepalive {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
        };
        let busy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, b) = tokio::io::duplex(64);
        let (ar, aw) = tokio::io::split(a);
        let (mut br, _bw) = tokio::io::split(b);
        let idle = busy.clone();
        let mut pinger = Liveness::new(ar, aw, Some(k))
            .without_idle_pings(move || !idle.load(std::sync::atomic::Ordering::Relaxed));
        let mut got = [0u8; 8];
        // Idle for 60 s of (paused) time: no PING, so nothing to time out either.
        tokio::select! {
            e = pinger.next() => panic!("an idle pinger reported {e:?}"),
            n = br.read(&mut got) => panic!("an idle pinger sent {:?}", &got[..n.unwrap()]),
            () = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
        // Busy: a PING within an interval, and, unanswered, a timeout.
        busy.store(true, std::sync::atomic::Ordering::Relaxed);
        let t0 = Instant::now();
        tokio::select! {
            e = pinger.next() => panic!("{e:?} before its PING"),
            n = br.read(&mut got) => assert_eq!(&got[..n.unwrap()], [PING]),
        }
        assert!(
            t0.elapsed() <= Duration::from_secs(10),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(pinger.next().await, Event::TimedOut, "nothing answered");
    }
}
