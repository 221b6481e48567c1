//! One client connection, whatever its transport: the lock around its [`Link`], its
//! CQ, and the two tasks that serve it (the driver and the liveness watcher).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rpc_transport::msg::RecvPool;
use rpc_transport::{CompletionQueue, WorkCompletion};
use tokio::net::TcpStream;

use super::link::{EncodedBody, Link, NewCall, Signals};
use crate::handshake::liveness::{Event, Keepalive, Liveness};
use crate::status::Status;
use crate::transport::completion::{CompletionMode, CqWaiter};
use crate::transport::endpoint::{Endpoint, Settings};
use crate::transport::lock;
use crate::transport::Error;

/// A transport whose connections a channel can dial (and dial again).
pub(crate) trait Dial: Link {
    /// Dials the endpoint: the handshake, then the connection's QP, slots and tasks.
    fn connect(ep: &Endpoint) -> impl Future<Output = Result<Arc<Conn<Self>>, Error>> + Send;
}

/// A connection's state under its lock: the link and the timer the driver sleeps on.
pub(crate) struct State<L> {
    pub(crate) link: L,
    /// The engine timer the driver sleeps until (a call due earlier kicks it).
    armed: Option<Instant>,
}

/// One connection (RC or UD), shared by its channel's clones, its calls and its tasks.
pub(crate) struct Conn<L> {
    state: Mutex<State<L>>,
    pub(crate) sig: Arc<Signals>,
    pool: RecvPool,
    cq: Arc<CompletionQueue>,
    mode: CompletionMode,
    pub(crate) default_timeout: Option<Duration>,
    /// Request bodies longer than this go by reference (`None`: never), read
    /// without the lock so that a small call pays one comparison.
    pub(crate) by_ref_above: Option<usize>,
}

impl<L: Link> Conn<L> {
    /// Starts serving `link`, whose receives `pool` posts and whose completions
    /// `cq` reports, with the endpoint's `settings`: spawns its driver and the
    /// watcher of the handshake connection `tcp` (its closing means the server is
    /// gone).
    pub(crate) fn spawn(
        link: L,
        sig: Arc<Signals>,
        (pool, cq): (RecvPool, Arc<CompletionQueue>),
        settings: &Settings,
        tcp: TcpStream,
    ) -> Arc<Conn<L>> {
        let by_ref_above = link.by_ref_above();
        let conn = Arc::new(Conn {
            by_ref_above,
            state: Mutex::new(State { link, armed: None }),
            sig,
            pool,
            cq,
            mode: settings.mode,
            default_timeout: settings.timeout,
        });
        tokio::spawn(drive(conn.clone()));
        tokio::spawn(watch(conn.clone(), tcp, settings.keepalive()));
        conn
    }

    /// Whether new calls may start here: not dead, not closed, not draining.
    pub(crate) fn usable(&self) -> bool {
        !self.sig.closing.load(Ordering::Acquire)
            && !self.draining()
            && self.lock().link.dead().is_none()
    }

    /// The server said GOAWAY: calls in flight finish here, new ones go elsewhere.
    pub(crate) fn draining(&self) -> bool {
        self.sig.draining.load(Ordering::Acquire)
    }

    /// Closes the connection (its channel let go of it): the driver stops, the
    /// handshake connection closes (so the server reclaims its side), and calls
    /// still open end `CANCELLED`.
    pub(crate) fn close(&self) {
        self.sig.closing.store(true, Ordering::Release);
        self.sig.shutdown.notify_one();
        let mut st = self.lock();
        self.fail(&mut st, Status::cancelled("channel closed"));
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State<L>> {
        lock(&self.state)
    }

    /// Ends every call: the connection is unusable.
    pub(crate) fn fail(&self, st: &mut State<L>, status: Status) {
        if st.link.dead().is_none() {
            tracing::debug!(%status, "connection lost");
        }
        st.link.fail(status);
        self.sig.ready.wake_all();
        self.sig.kick.notify_one();
    }

    /// Starts a reserved call and makes sure the driver wakes for its timer.
    ///
    /// A body by reference is encoded into its region before the connection's lock
    /// is taken: encoding 64 MiB takes milliseconds, and under the lock it held every
    /// other call of the connection (and the driver delivering their replies), each
    /// waiting on the lock with its worker thread. The region was taken in line
    /// already ([`Link::region_for`]); only the post needs the lock. A small call
    /// (no region) is encoded into its send slot under the lock, as before.
    pub(crate) fn start(
        &self,
        reply: super::ReplySender,
        head: crate::engine::CallHead<'_>,
        body: &dyn crate::server::EncodeMessage,
        region: Option<rpc_transport::msg::PooledRegion>,
    ) -> Result<u32, Status> {
        let now = Instant::now();
        let region = region.map(|mut region| {
            let len = body.encoded_len();
            body.encode_to(&mut region.buf_mut()[..len]);
            EncodedBody { region, len }
        });
        let mut st = self.lock();
        let call = NewCall {
            now,
            reply,
            head,
            body,
            region,
        };
        let (id, timer) = match st.link.start(&self.sig, call) {
            Ok(started) => started,
            Err(s) => {
                // The reservation is spent either way: let a waiting caller look
                // again (and see the connection dead, if it died posting).
                self.sig.ready.wake_all();
                if st.link.dead().is_some() {
                    self.sig.kick.notify_one();
                }
                return Err(s);
            }
        };
        if let Some(t) = timer {
            if st.armed.is_none_or(|a| t < a) {
                self.sig.kick.notify_one();
            }
        }
        Ok(id)
    }

    /// Handles a batch of completions under one lock; then the next timer.
    fn handle(&self, wcs: &[WorkCompletion]) -> Next {
        let mut st = self.lock();
        if st.link.dead().is_some() {
            return Next::Stop;
        }
        let room = st.link.handle(Instant::now(), wcs, &self.pool);
        self.after(st, room)
    }

    /// The driver was kicked: sends what waits; then the next timer.
    fn kicked(&self) -> Next {
        let mut st = self.lock();
        if st.link.dead().is_some() {
            return Next::Stop;
        }
        st.link.on_kick();
        self.after(st, false)
    }

    /// The engine's timer fired; then the next timer.
    fn timer(&self) -> Next {
        let mut st = self.lock();
        if st.link.dead().is_some() {
            return Next::Stop;
        }
        let ended = st.link.handle_timeout(Instant::now());
        self.after(st, ended)
    }

    /// Ends a driver step under the lock it took: arms the engine's next timer, and
    /// wakes callers waiting for room if some came back or the connection died.
    fn after(&self, mut st: MutexGuard<'_, State<L>>, room: bool) -> Next {
        let drained = self.draining() && st.link.open_calls() == 0;
        let next = if st.link.dead().is_some() || drained {
            Next::Stop
        } else {
            st.armed = st.link.poll_timeout();
            Next::Until(st.armed)
        };
        drop(st);
        if drained {
            // GOAWAY, and the last call here has its answer: let the server go.
            self.close();
        }
        if room || matches!(next, Next::Stop) {
            self.sig.ready.wake_all();
        }
        next
    }
}

impl<L> Drop for Conn<L> {
    /// The connection's memory (receive pool, rings, queue pair) is freed now: the
    /// process trims its heap a little later, once for a burst of such ends.
    fn drop(&mut self) {
        crate::transport::heap_release::connection_closed();
    }
}

/// What the driver does after a step.
enum Next {
    /// Waits for completions, or until the engine's timer at this instant.
    Until(Option<Instant>),
    /// The connection is dead.
    Stop,
}

/// The connection's driver: reaps its CQ and runs the engine's timers until the
/// connection dies or closes. It sleeps until the engine's next timer, never on a
/// timer of its own; each step computes the next timer under the lock it already
/// holds, and with none armed it waits on the CQ alone (no timer to poll).
async fn drive<L: Link>(conn: Arc<Conn<L>>) {
    let mut wcs = [WorkCompletion::default(); 64];
    let mut waiter = CqWaiter::default();
    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    let mut timer_at = None;
    let mut next = {
        let st = conn.lock();
        conn.after(st, false)
    };
    loop {
        if conn.sig.closing.load(Ordering::Acquire) {
            return;
        }
        let r = match next {
            Next::Stop => return,
            Next::Until(None) => {
                waiter
                    .wait(&conn.cq, conn.mode, &mut wcs, &conn.sig.kick)
                    .await
            }
            Next::Until(Some(t)) => {
                if timer_at != Some(t) {
                    // One timer entry re-armed in place, not a new one per step.
                    timer.as_mut().reset(t.into());
                    timer_at = Some(t);
                }
                tokio::select! {
                    r = waiter.wait(&conn.cq, conn.mode, &mut wcs, &conn.sig.kick) => r,
                    () = &mut timer => {
                        timer_at = None;
                        next = conn.timer();
                        continue;
                    }
                }
            }
        };
        next = match r {
            Ok(0) => conn.kicked(),
            Ok(n) => conn.handle(&wcs[..n]),
            Err(e) => {
                let mut st = conn.lock();
                conn.fail(
                    &mut st,
                    Status::unavailable(format!("completion queue failed: {e}")),
                );
                return;
            }
        };
    }
}

/// Holds the handshake connection: its closing (or, with a keepalive, a PING
/// unanswered) means the server is gone, and a GOAWAY on it means the server
/// drains: no new call starts on this connection.
async fn watch<L: Link>(conn: Arc<Conn<L>>, tcp: TcpStream, keepalive: Option<Keepalive>) {
    let (rd, wr) = tcp.into_split();
    let mut live = Liveness::new(rd, wr, keepalive);
    loop {
        let event = tokio::select! {
            event = live.next() => event,
            // Dropping the stream closes it: the server reclaims the connection.
            () = conn.sig.shutdown.notified() => return,
        };
        let lost = match event {
            Event::GoAway => {
                tracing::debug!("server sent GOAWAY; new calls go to a new connection");
                conn.sig.draining.store(true, Ordering::Release);
                // Callers waiting for room here look again, and dial elsewhere;
                // the driver closes the connection once its calls are answered.
                conn.sig.ready.wake_all();
                conn.sig.kick.notify_one();
                continue;
            }
            Event::Closed => "the server closed the connection",
            Event::TimedOut => "the server did not answer a keepalive ping in time",
        };
        let mut st = conn.lock();
        conn.fail(&mut st, Status::unavailable(lost));
        return;
    }
}
