//! One client connection, whatever its transport: the lock around its [`Link`], its
//! CQ, and the two tasks that serve it (the driver and the liveness watcher).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rpc_transport::msg::RecvPool;
use rpc_transport::{CompletionQueue, WorkCompletion};
use tokio::net::TcpStream;

use super::link::{InPlace, Lend, Link, NewCall, Signals};
use crate::handshake::liveness::{Event, Keepalive, Liveness};
use crate::status::Status;
use crate::transport::completion::{yield_stealable, CompletionMode, CqWaiter, Kicks};
use crate::transport::endpoint::{Endpoint, Settings};
use crate::transport::lock;
use crate::transport::spin_budget::SpinBudget;
use crate::transport::unstranded::{unstranded, DriverWaker};
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
    /// How long a caller reaping its own reply spins now (`Adaptive` mode).
    pub(crate) reap_spin: SpinBudget,
    pub(crate) default_timeout: Option<Duration>,
    /// Request bodies longer than this go by reference (`None`: never), read
    /// without the lock so that a small call pays one comparison.
    pub(crate) by_ref_above: Option<usize>,
    /// Such bodies may be lent where their `Bytes` lie (`in_place`).
    pub(crate) in_place: Option<InPlace>,
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
        let in_place = link.in_place();
        let conn = Arc::new(Conn {
            by_ref_above,
            in_place,
            state: Mutex::new(State { link, armed: None }),
            sig,
            pool,
            cq,
            mode: settings.mode,
            reap_spin: SpinBudget::new(match settings.mode {
                CompletionMode::Adaptive(d) => d,
                _ => Duration::ZERO,
            }),
            default_timeout: settings.timeout,
        });
        tokio::spawn(unstranded(|driver| drive(conn.clone(), driver)));
        let idle_pings = settings.keepalive_while_idle;
        tokio::spawn(watch(conn.clone(), tcp, settings.keepalive(), idle_pings));
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
        self.sig.reaper.notify_one();
    }

    /// Starts a reserved call and makes sure the driver wakes for its timer.
    ///
    /// A body by reference is encoded into its region before the connection's lock
    /// is taken: encoding 64 MiB takes milliseconds, and under the lock it held every
    /// other call of the connection (and the driver delivering their replies), each
    /// waiting on the lock with its worker thread. The region was taken in line
    /// already ([`Link::region_for`]); only the post needs the lock. A small call
    /// (no region) is encoded into its send slot under the lock, as before.
    ///
    /// Returns the call's id and whether its caller reaps its own reply
    /// ([`Conn::caller_reaps`], decided under the same lock).
    pub(crate) fn start(
        &self,
        reply: super::ReplySender,
        head: crate::engine::CallHead<'_>,
        body: &dyn crate::server::EncodeMessage,
        mut region: Option<Lend>,
    ) -> Result<(u32, bool), Status> {
        if let Some(Lend::Region {
            region,
            len,
            encoded: false,
        }) = &mut region
        {
            body.encode_to(&mut region.buf_mut()[..*len]);
        }
        let mut st = self.lock();
        let call = NewCall {
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
        let alone = self.caller_reaps(&st);
        drop(st);
        // The last reply's receive, left for now (`RecvSlot::repost_later`): posted
        // while this request is on its way rather than before.
        let _ = self.pool.flush_deferred();
        Ok((id, alone))
    }

    /// Posts a receive left waiting by [`RecvSlot::repost_later`] (`true` if there
    /// may have been one): its credit comes back with it, which a caller finding no
    /// room waits for.
    ///
    /// [`RecvSlot::repost_later`]: rpc_transport::msg::RecvSlot::repost_later
    pub(crate) fn flush_deferred_receive(&self) -> bool {
        self.pool.flush_deferred()
    }

    /// How this connection's completions are reaped.
    pub(crate) fn mode(&self) -> CompletionMode {
        self.mode
    }

    /// Calls open (started and not ended, streams included).
    pub(crate) fn open_calls(&self) -> usize {
        self.lock().link.open_calls()
    }

    /// Decides, under the lock a call was just started under, who reaps its reply
    /// (`reap.rs`): its caller, if it is the only call open and no other caller
    /// holds a reservation (the driver steps aside); else the driver, called back
    /// if it stepped aside. Under the lock, so that a second call either sees the
    /// driver aside (and calls it back) or makes the first one not alone.
    pub(crate) fn caller_reaps(&self, st: &State<L>) -> bool {
        let alone = st.link.open_calls() == 1 && st.link.reserved() == 0;
        if alone {
            self.sig.aside.store(true, Ordering::SeqCst);
        } else {
            self.driver_reaps();
        }
        alone
    }

    /// The driver reaps the CQ again if it had left it to a caller (`reap.rs`):
    /// a second call, or one only the driver serves (a streaming call), starts, or
    /// a caller waits for room that only reaped completions bring back.
    pub(crate) fn driver_reaps(&self) {
        // A load first: most calls find the driver reaping, and a swap per call
        // would bounce the flag's cache line between the workers.
        if self.sig.aside.load(Ordering::SeqCst) && self.sig.aside.swap(false, Ordering::SeqCst) {
            self.sig.kick.notify_one();
            // A caller asleep on the CQ in the driver's place awaits its reply
            // from the driver from now on.
            self.sig.reaper.notify_one();
        }
    }

    /// The connection's CQ.
    pub(crate) fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// One poll of the CQ by a caller, its batch handled as the driver would, if
    /// it can take `sig.reaping` (released before returning). `None` if it cannot
    /// (the driver has the CQ); else whether anything was reaped.
    pub(crate) fn reap(&self, wcs: &mut [WorkCompletion]) -> Option<bool> {
        let reaping = &self.sig.reaping;
        if reaping
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let reaped = match self.cq.poll(wcs) {
            Ok(0) => false,
            r => {
                self.handle_reaped(r, wcs);
                true
            }
        };
        reaping.store(false, Ordering::Release);
        Some(reaped)
    }

    /// Handles what a caller holding `sig.reaping` reaped (`r` completions in
    /// `wcs`, or the CQ's failure) as the driver would, and kicks the driver if it
    /// must look: the connection died, or the batch set an engine timer earlier
    /// than the one it sleeps until.
    pub(crate) fn handle_reaped(&self, r: rpc_transport::Result<usize>, wcs: &[WorkCompletion]) {
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                let mut st = self.lock();
                let status = Status::unavailable(format!("completion queue failed: {e}"));
                self.fail(&mut st, status);
                return;
            }
        };
        let mut st = self.lock();
        let before = st.armed;
        let next = if st.link.dead().is_some() {
            Next::Stop
        } else {
            let room = st.link.handle(&wcs[..n], &self.pool);
            self.after(st, room)
        };
        let wake = match next {
            Next::Stop => true,
            Next::Until(Some(t)) => before.is_none_or(|b| t < b),
            Next::Until(None) => false,
        };
        if wake {
            self.sig.kick.notify_one();
        }
    }

    /// After a driver step that may have ended a call whose caller reaps (a timer,
    /// a kick, a batch reaped before the driver stepped aside): a caller asleep on
    /// the CQ in the driver's place looks at its reply.
    fn wake_reaper(&self) {
        if self.sig.aside.load(Ordering::Acquire) {
            self.sig.reaper.notify_one();
        }
    }

    /// Handles a batch of completions under one lock; then the next timer.
    fn handle(&self, wcs: &[WorkCompletion]) -> Next {
        let mut st = self.lock();
        if st.link.dead().is_some() {
            return Next::Stop;
        }
        let room = st.link.handle(wcs, &self.pool);
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
///
/// While a caller reaps the CQ itself (`reap.rs`), the driver leaves it alone and
/// waits for a kick or its timer only: the caller's reply then reaches it with no
/// task switch, and the driver's task is not polled at all.
async fn drive<L: Link>(conn: Arc<Conn<L>>, driver: DriverWaker) {
    let mut wcs = [WorkCompletion::default(); 64];
    let mut waiter = CqWaiter::woken_by(driver);
    let kicked = std::pin::pin!(conn.sig.kick.notified());
    let mut kicks = Kicks::new(&conn.sig.kick, kicked);
    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    let mut timer_at = None;
    let mut next = {
        let st = conn.lock();
        conn.after(st, false)
    };
    let sig = &conn.sig;
    // The driver holds `reaping` from when it takes the CQ until it steps aside,
    // not per step: then a step writes no flag the callers read.
    let mut reaps = false;
    loop {
        if sig.closing.load(Ordering::Acquire) {
            return;
        }
        let Next::Until(until) = next else { return };
        // The CQ is the driver's unless a caller has it (or asked for it).
        if sig.aside.load(Ordering::Acquire) {
            if reaps {
                sig.reaping.store(false, Ordering::Release);
                reaps = false;
            }
        } else if !reaps {
            reaps = sig
                .reaping
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
            if !reaps {
                // A caller is within one poll of the CQ (it never holds it longer):
                // look again at once rather than wait for a kick nobody sends.
                yield_stealable().await;
                continue;
            }
        }
        let cq_wait = async {
            if reaps {
                waiter
                    .wait(&conn.cq, conn.mode, &mut wcs, &mut kicks, &sig.aside)
                    .await
            } else {
                kicks.next().await;
                Ok(0)
            }
        };
        let r = match until {
            None => cq_wait.await,
            Some(t) => {
                if timer_at != Some(t) {
                    // One timer entry re-armed in place, not a new one per step.
                    timer.as_mut().reset(t.into());
                    timer_at = Some(t);
                }
                // `biased` (no per-wait RNG), the timer first: a CQ that always
                // has more never holds a deadline back.
                tokio::select! {
                    biased;
                    () = &mut timer => {
                        timer_at = None;
                        next = conn.timer();
                        conn.wake_reaper();
                        continue;
                    }
                    r = cq_wait => r,
                }
            }
        };
        next = match r {
            Ok(0) => {
                let next = conn.kicked();
                conn.wake_reaper();
                next
            }
            Ok(n) => {
                let next = conn.handle(&wcs[..n]);
                // A call that started alone while this batch was on its way may
                // have had its reply in it: its caller, if it took the CQ after
                // looking for the reply, sleeps on it and must look again.
                conn.wake_reaper();
                next
            }
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
async fn watch<L: Link>(
    conn: Arc<Conn<L>>,
    tcp: TcpStream,
    keepalive: Option<Keepalive>,
    idle_pings: bool,
) {
    let (rd, wr) = tcp.into_split();
    let mut live = Liveness::new(rd, wr, keepalive);
    if !idle_pings {
        let c = conn.clone();
        live = live.without_idle_pings(move || c.open_calls() == 0);
    }
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
