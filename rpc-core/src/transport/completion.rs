//! How a driver waits for completions.

use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};

use rpc_transport::{CompletionQueue, WorkCompletion};

use super::spin_budget::SpinBudget;
use super::unstranded::{on_driver, unstranded, DriverWaker};

/// How completions are reaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionMode {
    /// Poll the CQ in a loop, yielding to tokio between polls: lowest latency, one
    /// core busy per connection (client) or per server while it runs.
    Busy,
    /// Sleep on the CQ's completion channel under tokio when it is empty: no CPU
    /// while idle, one wake-up per burst.
    Event,
    /// Busy-poll for up to this long after the last completion, then sleep as
    /// `Event`: near-busy latency under load, idle cost of `Event`. Where spins keep
    /// missing a completion that comes right after the poller slept (more runnable
    /// threads than cores: the spin held the core its peer needed), the spin
    /// shortens down to none and is probed again now and then (`spin_budget`).
    Adaptive(Duration),
}

/// `Adaptive(50 µs)` by default: spinning that briefly after a completion catches the
/// next message of a conversation (a reply, the client's next request) without a
/// sleep and wake-up, which on these machines costs tens of microseconds (a 2-vCPU
/// VM whose idle vCPUs halt), and it batches bursts; idle, it costs nothing.
/// `rpc-bench`, two processes, soft provider, 32 B echo, same run against tonic:
///
/// | mode | 1 in flight p50 | 16 in flight | 256 in flight | CPU per call at 256 |
/// | --- | --- | --- | --- | --- |
/// | `Event` | 72 µs (tonic 104 µs) | 111 k calls/s | 224 k calls/s (tonic 63 k) | 7.7 µs |
/// | `Adaptive(200 µs)` | 12.1 µs (tonic 109 µs) | 148 k calls/s | 377 k calls/s (tonic 68 k) | 5.0 µs |
/// | `Adaptive(50 µs)` | 12.1 µs (tonic 115 µs) | 172 k calls/s | 439 k calls/s (tonic 69 k) | 4.1 µs |
///
/// (2026-11-21.) Again on 2026-11-30, with the shared-memory link, on a slower day
/// for the host (tonic at 256 in flight 21–28 k calls/s), two runs of each mode,
/// same columns: `Event` 30–32 µs, 119–133 k, 191–231 k, 7.4–9.0 µs;
/// `Adaptive(200 µs)` 6.4–7.3 µs, 293–335 k, 257–270 k, 7.0–7.1 µs;
/// `Adaptive(50 µs)` 6.1–6.8 µs, 260–335 k, 266–293 k, 6.0–6.5 µs.
///
/// In one process (`tests/tests/perf.rs`, release) `Adaptive(200 µs)` also beat
/// `Event` at 256 in flight (580 k against 260 k calls/s). `Busy` never sleeps: only
/// with a core to spare per poller. `Event` spends no CPU beyond the work itself,
/// for processes with many mostly idle connections.
impl Default for CompletionMode {
    fn default() -> Self {
        CompletionMode::Adaptive(Duration::from_micros(50))
    }
}

/// A driver's waits on its CQ: remembers whether its last batch drained the CQ (was
/// shorter than the buffer), so that an event-driven wait can arm at once instead of
/// polling first (every futile poll of the soft provider is a `recv` per connection).
pub(crate) struct CqWaiter {
    drained: bool,
    /// The waker of the CQ's sleeps in `Event` mode, for a poller `unstranded` runs.
    driver: Option<DriverWaker>,
    /// How long `Adaptive` spins now (`spin_budget`): set on its first wait.
    budget: Option<SpinBudget>,
}

impl CqWaiter {
    /// A waiter for a poller `unstranded` runs, whose CQ sleeps wake it by `driver`.
    pub(crate) fn woken_by(driver: DriverWaker) -> CqWaiter {
        CqWaiter {
            drained: false,
            driver: Some(driver),
            budget: None,
        }
    }

    /// Waits for completions into `wc` by `mode`, returning early with 0 when `kick`
    /// is notified (someone has work for the driver that no completion will announce)
    /// or, while it spins, when `stop` is set (a caller takes over the CQ).
    ///
    /// One async fn with a labelled block rather than a helper future: every nested
    /// future is built and then moved into its parent's state, a copy per wait, and
    /// a driver waits twice per call. When the CQ may hold completions it is polled
    /// before any future is built at all.
    pub(crate) async fn wait(
        &mut self,
        cq: &CompletionQueue,
        mode: CompletionMode,
        wc: &mut [WorkCompletion],
        kicks: &mut Kicks<'_, '_>,
        stop: &AtomicBool,
    ) -> rpc_transport::Result<usize> {
        let r = 'wait: {
            let spin = match mode {
                CompletionMode::Busy => None,
                CompletionMode::Event => {
                    if !self.drained {
                        match cq.poll(wc) {
                            Ok(0) => {}
                            r => break 'wait r,
                        }
                    }
                    // `biased`: no random branch order per wait (tokio's per-select
                    // RNG, a hundred instructions a call); the kick first, so that a
                    // CQ that always has more never starves it.
                    break 'wait tokio::select! {
                        biased;
                        () = kicks.next() => Ok(0),
                        r = on_driver(self.driver.as_ref(), cq.wait_async(wc)) => r,
                    };
                }
                CompletionMode::Adaptive(d) => {
                    let budget = self.budget.get_or_insert_with(|| SpinBudget::new(d));
                    Some(
                        budget
                            .spin()
                            .max(read_spin(rpc_transport::msg::reads_in_flight())),
                    )
                }
            };
            let mut clock = SpinClock::start();
            // A find by the first poll says nothing about spinning.
            let mut spun = false;
            let mut turns = SpinTurns::default();
            loop {
                let n = cq.poll(wc)?;
                if n > 0 {
                    if let Some(b) = self.budget.as_ref().filter(|_| spun) {
                        b.found();
                    }
                    break 'wait Ok(n);
                }
                if stop.load(Ordering::Relaxed) {
                    break 'wait Ok(0);
                }
                spun = true;
                if !turns.turn() {
                    continue;
                }
                match spin {
                    Some(d) if clock.spun(d) => break,
                    _ => {
                        // A kick already pending must not wait for the next completion.
                        if kicks.take_pending() {
                            break 'wait Ok(0);
                        }
                        yield_stealable().await;
                    }
                }
            }
            // After a spin, the poller's own waker (its decoy on every wake): with
            // `DriverWaker` here, 256 calls in flight ran a quarter slower (`rpc-bench`).
            let slept_at = Instant::now();
            let r = tokio::select! {
                biased; // as above
                () = kicks.next() => Ok(0),
                r = cq.wait_async(wc) => r,
            };
            if let (Some(b), Some(spun), Ok(1..)) = (&self.budget, spin, &r) {
                b.missed(spun, slept_at.elapsed());
            }
            r
        };
        // A kick (Ok(0)) says nothing about the CQ: keep what the last batch said.
        if let Ok(n) = r {
            if n > 0 {
                self.drained = n < wc.len();
            }
        }
        r
    }
}

/// A driver's registration for its kicks, kept across its waits: registering a
/// waiter with the `Notify` and taking it out again each lock the `Notify`'s list,
/// and a driver waits once or twice per call. A kick that comes while the driver
/// works is kept by the registration (as `notify_one` keeps a permit) and ends
/// its next wait at once.
pub(crate) struct Kicks<'a, 'b> {
    notify: &'a tokio::sync::Notify,
    next: std::pin::Pin<&'b mut tokio::sync::futures::Notified<'a>>,
}

impl<'a, 'b> Kicks<'a, 'b> {
    /// Kicks of `notify`, registered in `slot` (`notify.notified()`, pinned by the
    /// driver for its lifetime).
    pub(crate) fn new(
        notify: &'a tokio::sync::Notify,
        slot: std::pin::Pin<&'b mut tokio::sync::futures::Notified<'a>>,
    ) -> Self {
        Kicks { notify, next: slot }
    }

    /// The next kick (cancel-safe: dropped before it came, the registration stays).
    pub(crate) async fn next(&mut self) {
        self.next.as_mut().await;
        // A finished `Notified` stays ready: the next kick needs a fresh one.
        self.next.set(self.notify.notified());
    }

    /// Whether a kick came (and takes it), without waiting.
    fn take_pending(&mut self) -> bool {
        let kicked = self.next.as_mut().enable();
        if kicked {
            self.next.set(self.notify.notified());
        }
        kicked
    }
}

/// The least an `Adaptive` poller spins while this process has one RDMA Read in
/// flight, of [`LONE_READ_FROM`] bytes to fewer than [`LONE_READ_BELOW`]: its
/// completion comes once the peer copied the bytes (about 100 µs per MiB between
/// two processes on one host), after a 50 µs spin ran out, so a stream of 1 MiB
/// messages paid a sleep and a wake-up per message. Spinning on, one 1 MiB server
/// stream went from 2,728 and 2,660 to 3,480 and 3,168 msgs/s, one client stream
/// from 2,975 and 2,756 to 3,518 and 3,486 (`rpc-bench --systems rdma-rpc,tonic
/// --workloads client_stream,server_stream --stream-sizes 64K,1M --streams 1,16`,
/// two alternating rounds).
const LONE_READ_SPIN: Duration = Duration::from_micros(300);
/// With several Reads in flight the cores have their copies to make, and from
/// 2 MiB the soft provider's peer copies a Read with two threads: a spinning
/// poller then takes a core the copying needs (spinning for any Read, 1 MiB echoes
/// at 16 in flight lost 12-13 % of their calls/s, and 4 MiB echoes at one 10 %).
const LONE_READ_BELOW: u64 = 2 << 20;
/// A shorter Read completes within the spin anyway, and spinning on past it only
/// took the peer's core: 64 KiB echoes lost 10-12 % of their calls/s.
const LONE_READ_FROM: u64 = 512 << 10;

/// How long at least an `Adaptive` poller spins with `reads` Reads of `bytes` in
/// flight in this process ([`rpc_transport::msg::reads_in_flight`]).
fn read_spin((reads, bytes): (u64, u64)) -> Duration {
    if reads == 1 && (LONE_READ_FROM..LONE_READ_BELOW).contains(&bytes) {
        LONE_READ_SPIN
    } else {
        Duration::ZERO
    }
}

/// Empty polls a spinning poller makes between looks at the clock (is its spin
/// over?) and yields to the worker's other tasks. Both cost about what a poll of
/// an empty CQ does, and the poll that finds the next message comes that much
/// later: at one per poll, 32 B × 1 p50 was 2.7, 2.7, 2.8, 2.7 µs, at one per 16
/// polls 2.6, 2.5, 2.5, 2.6 µs (`rpc-bench --systems rdma-rpc,rdma-rpc-tcp --sizes
/// 32 --concurrency 1`, four alternating rounds). The other tasks wait at most 16
/// polls, a few microseconds.
const POLLS_PER_YIELD: u32 = 16;

/// A spinning poller's count of its empty polls: one in [`POLLS_PER_YIELD`] is its
/// turn to look at the clock and yield; the others only pause the core briefly.
#[derive(Default)]
pub(crate) struct SpinTurns(u32);

impl SpinTurns {
    /// Counts an empty poll; whether this one is a turn.
    pub(crate) fn turn(&mut self) -> bool {
        self.0 = self.0.wrapping_add(1);
        let turn = self.0.is_multiple_of(POLLS_PER_YIELD);
        if !turn {
            std::hint::spin_loop();
        }
        turn
    }
}

/// How long a poller has spun: the time since it began, less the time between two
/// turns in which its own polls copied bytes for a peer
/// ([`rpc_transport::copied_for_peers`]: the soft provider placing a Read's
/// response, 20 µs for 256 KiB). Counted as spinning, that work ended the 50 µs
/// spin before the reply it waited for; the spin budget then counted a miss, and a
/// 256 KiB echo lost its spinning for good (p50 141 µs, against 49 µs when
/// spinning 200 µs). Time the thread lost to others (preempted, or the worker's
/// other tasks) still counts: spinning on after it would hold a core a peer needs.
pub(crate) struct SpinClock {
    start: Instant,
    last: Instant,
    copied: u64,
    working: Duration,
}

impl SpinClock {
    pub(crate) fn start() -> SpinClock {
        SpinClock::at(Instant::now(), rpc_transport::copied_for_peers())
    }

    fn at(now: Instant, copied: u64) -> SpinClock {
        SpinClock {
            start: now,
            last: now,
            copied,
            working: Duration::ZERO,
        }
    }

    /// At a turn: whether the poller has spun for `d`.
    pub(crate) fn spun(&mut self, d: Duration) -> bool {
        self.spun_at(d, Instant::now(), rpc_transport::copied_for_peers())
    }

    /// [`SpinClock::spun`] at `now`, with `copied` bytes counted so far.
    fn spun_at(&mut self, d: Duration, now: Instant, copied: u64) -> bool {
        if copied != self.copied {
            self.copied = copied;
            self.working += now - self.last;
        }
        self.last = now;
        now - self.start >= d + self.working
    }
}

/// Lets the worker's other tasks run once, then continues, from the back of the
/// worker's run queue. Not `tokio::task::yield_now`: that parks the task in the
/// worker's defer list, which only a parking worker wakes, so a task the poller
/// just spawned (a handler busy with a 64 MiB body, or one that blocks) would hold
/// the poller, and every connection's calls with it, while the other worker idles
/// (`tests/tests/large_fairness.rs`). Here the task is in the run queue, where
/// an idle worker steals it.
pub(crate) async fn yield_stealable() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

/// A server poller: reaps `cq` by `mode`, handing each batch to `handle`, until
/// `closing` is set (its setter kicks `kick` so that a sleeping poller looks).
pub(crate) async fn serve_cq(
    cq: &CompletionQueue,
    mode: CompletionMode,
    kick: &tokio::sync::Notify,
    closing: &AtomicBool,
    what: &'static str,
    mut handle: impl FnMut(&[WorkCompletion]),
) {
    // Every call the server serves waits for this one task (`unstranded`).
    unstranded(|driver| async move {
        let mut wcs = [WorkCompletion::default(); 64];
        let mut waiter = CqWaiter::woken_by(driver);
        let kicked = std::pin::pin!(kick.notified());
        let mut kicks = Kicks::new(kick, kicked);
        // Nobody takes the server's CQ over.
        let never = AtomicBool::new(false);
        while !closing.load(Ordering::Acquire) {
            match waiter.wait(cq, mode, &mut wcs, &mut kicks, &never).await {
                Ok(0) => {}
                Ok(n) => handle(&wcs[..n]),
                Err(e) => {
                    tracing::error!(error = %e, "{what} completion queue failed");
                    return;
                }
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Waker};

    use super::{read_spin, Kicks, SpinClock, LONE_READ_SPIN};
    use std::time::Duration;

    #[test]
    fn a_poller_spins_on_for_a_lone_read_of_512_kib_to_2_mib_only() {
        const MIB: u64 = 1 << 20;
        assert_eq!(read_spin((1, MIB + 64)), LONE_READ_SPIN, "one 1 MiB Read");
        assert_eq!(read_spin((0, 0)), Duration::ZERO, "no Read");
        assert_eq!(read_spin((2, MIB)), Duration::ZERO, "two Reads of 512 KiB");
        assert_eq!(read_spin((1, 2 * MIB)), Duration::ZERO, "one of 2 MiB");
        assert_eq!(read_spin((1, 64 << 10)), Duration::ZERO, "one of 64 KiB");
        assert_eq!(read_spin((1, MIB / 2)), LONE_READ_SPIN, "one of 512 KiB");
    }

    /// One poll of a fresh `next()` (dropped after it, as a `select!` that another
    /// branch won drops it): whether it found a kick.
    fn kicked(kicks: &mut Kicks<'_, '_>) -> bool {
        let next = std::pin::pin!(kicks.next());
        next.poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    }

    #[test]
    fn each_kick_ends_one_wait_even_when_it_came_between_waits() {
        let notify = tokio::sync::Notify::new();
        let slot = std::pin::pin!(notify.notified());
        let mut kicks = Kicks::new(&notify, slot);
        assert!(!kicked(&mut kicks), "no kick yet");
        // Registered by that wait (then dropped): a kick while nobody waits is kept.
        notify.notify_one();
        assert!(kicked(&mut kicks));
        assert!(!kicked(&mut kicks), "one kick ends one wait");
        // A kick before the first registration is kept too (as a permit).
        let notify = tokio::sync::Notify::new();
        notify.notify_one();
        let slot = std::pin::pin!(notify.notified());
        let mut kicks = Kicks::new(&notify, slot);
        assert!(kicks.take_pending());
        assert!(!kicks.take_pending());
        notify.notify_one();
        assert!(kicks.take_pending());
        assert!(!kicked(&mut kicks));
    }

    #[test]
    fn a_spin_does_not_count_its_own_copies_for_peers_as_spinning() {
        const SPIN: Duration = Duration::from_millis(1);
        let t0 = std::time::Instant::now();
        let mut clock = SpinClock::at(t0, 0);
        // A turn after a poll that copied for a peer for five spins' time.
        assert!(
            !clock.spun_at(SPIN, t0 + 5 * SPIN, 1),
            "a poll that copied for a peer for five spins' time ended the spin"
        );
        // Five spins' time more with no copy is spinning.
        assert!(
            clock.spun_at(SPIN, t0 + 10 * SPIN, 1),
            "time with no copy is spinning"
        );
    }
}
