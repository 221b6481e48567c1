//! A simulated fabric between one client and one server engine, in the style of
//! quinn-proto's test harness: discrete time, a seeded generator, knobs for latency,
//! reorder and loss, and checks of the receive-queue invariants on every delivery.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::engine::{
    CallHead, ClientConfig, ClientConn, Completion, CreditWindow, Incoming, Reply, RequestBody,
    ServerConfig, ServerConn,
};
use crate::metadata::MetadataMap;
use crate::server::EncodeMessage;
use crate::status::Status;

/// Raw bytes as a message (the engine only needs `EncodeMessage`).
#[derive(Debug, Clone)]
pub(super) struct Raw(pub(super) Vec<u8>);

impl EncodeMessage for Raw {
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn encode_to(&self, out: &mut [u8]) {
        out[..self.0.len()].copy_from_slice(&self.0);
    }
}

/// Deterministic xorshift generator.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub(super) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() % 1_000_000) as f64 / 1_000_000.0 < p
    }
}

/// Fabric knobs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Knobs {
    /// Ticks a frame spends on the wire.
    pub(super) latency: u64,
    /// Probability that a frame swaps places with the one behind it.
    pub(super) reorder: f64,
    /// Probability that a frame is lost.
    pub(super) loss: f64,
    /// Ticks the application takes per call.
    pub(super) app_delay: u64,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            latency: 1,
            reorder: 0.0,
            loss: 0.0,
            app_delay: 0,
        }
    }
}

struct Frame {
    at: u64,
    imm: u32,
    bytes: Vec<u8>,
}

/// One direction of the wire.
#[derive(Default)]
struct Link {
    q: VecDeque<Frame>,
}

impl Link {
    fn push(&mut self, rng: &mut Rng, k: &Knobs, f: Frame) {
        if rng.chance(k.loss) {
            return;
        }
        self.q.push_back(f);
        let n = self.q.len();
        if n >= 2 && rng.chance(k.reorder) {
            self.q.swap(n - 1, n - 2);
        }
    }
    fn pop_due(&mut self, now: u64) -> Option<Frame> {
        if self.q.front().is_some_and(|f| f.at <= now) {
            self.q.pop_front()
        } else {
            None
        }
    }
}

/// A pending application call on the server.
struct AppCall {
    due: u64,
    id: u32,
    reply: Result<Vec<u8>, Status>,
}

/// What the application does with a request body.
pub(super) type App = fn(&str, &[u8]) -> Result<Vec<u8>, Status>;

/// Echoes the body.
pub(super) fn echo(_path: &str, body: &[u8]) -> Result<Vec<u8>, Status> {
    Ok(body.to_vec())
}

/// Client + server + fabric.
pub(super) struct Sim {
    pub(super) client: ClientConn<u64>,
    pub(super) server: ServerConn,
    pub(super) knobs: Knobs,
    pub(super) rng: Rng,
    pub(super) tick: u64,
    epoch: Instant,
    to_server: Link,
    to_client: Link,
    /// Receives posted at the server for this connection (SRQ budget).
    server_recvs: u32,
    /// Receives posted at the client.
    client_recvs: u32,
    credits: u32,
    frame: usize,
    app: App,
    app_calls: VecDeque<AppCall>,
    /// Ended calls: (waiter tag, result bytes or status).
    pub(super) done: Vec<(u64, Result<Vec<u8>, Status>)>,
    /// Server receive slots the application still holds (InFrame requests).
    held_by_app: u32,
    /// Tick at which the server stops answering (to test a silent peer).
    pub(super) server_mute: bool,
    /// With credit windows: the driver's policy, run before the server answers,
    /// returns the window's target (the sim then reserves or releases receives).
    policy: Option<Policy>,
    /// With credit windows: the largest window the client has seen.
    pub(super) peak_window: u32,
}

/// A credit policy: the server's window and the tick → the target.
pub(super) type Policy = fn(&mut CreditWindow, u64) -> u32;

impl Sim {
    pub(super) fn new(credits: u32, frame: usize, max_msg: usize, knobs: Knobs) -> Sim {
        Sim {
            client: ClientConn::new(ClientConfig {
                credits,
                frame_size: frame,
                max_send_message: max_msg,
                max_recv_message: max_msg,
            }),
            server: ServerConn::new(ServerConfig {
                frame_size: frame,
                max_recv_message: max_msg,
                max_send_message: max_msg,
                buffer_cap: 2 * max_msg + frame,
            }),
            knobs,
            rng: Rng::new(7),
            tick: 0,
            epoch: Instant::now(),
            to_server: Link::default(),
            to_client: Link::default(),
            server_recvs: credits,
            client_recvs: credits,
            credits,
            frame,
            app: echo,
            app_calls: VecDeque::new(),
            done: Vec::new(),
            held_by_app: 0,
            server_mute: false,
            policy: None,
            peak_window: 0,
        }
    }

    /// Credit windows: both ends start at the minimal window of 2 and the server
    /// moves it up to `max` by `policy`, as the driver does with its shared pool.
    /// The server's receives for this connection follow the reservation, so a
    /// release that a frame still needs shows up as an RNR.
    pub(super) fn with_windows(mut self, max: u32, policy: Policy) -> Sim {
        let cfg = ClientConfig {
            credits: 2,
            frame_size: self.frame,
            max_send_message: 1 << 20,
            max_recv_message: 1 << 20,
        };
        self.client = ClientConn::new(cfg).with_credit_windows(max);
        self.server.set_credit(CreditWindow::dynamic(2, max));
        self.policy = Some(policy);
        self.server_recvs = 2;
        self.client_recvs = 2;
        self.credits = 2;
        self
    }

    /// The driver's settle: the policy's target, receives reserved before a grant
    /// and released once revokes have left.
    fn settle(&mut self) {
        let Some(policy) = self.policy else {
            return;
        };
        let tick = self.tick;
        let w = self.server.credit_mut();
        let target = policy(w, tick);
        w.set_target(target);
        let need = w.committed();
        if need > w.reserved {
            self.server_recvs += need - w.reserved;
        } else {
            let d = w.reserved - need;
            assert!(
                self.server_recvs >= d,
                "released {d} receives while frames may still need them"
            );
            self.server_recvs -= d;
        }
        w.reserved = need;
    }

    pub(super) fn with_app(mut self, app: App) -> Sim {
        self.app = app;
        self
    }

    pub(super) fn now(&self) -> Instant {
        self.epoch + Duration::from_millis(self.tick)
    }

    /// Starts a call if a token is free; returns its id.
    pub(super) fn try_call(
        &mut self,
        tag: u64,
        path: &str,
        body: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Option<Result<u32, Status>> {
        if !self.client.reserve() {
            return None;
        }
        let mut out = vec![0u8; self.frame];
        let now = self.now();
        let md = MetadataMap::new();
        let r = self.client.start_call(
            now,
            tag,
            &CallHead::new(path, &md, timeout),
            &Raw(body),
            &mut out,
        );
        Some(r.map(|(id, t)| {
            out.truncate(t.len);
            let at = self.tick + self.knobs.latency;
            self.to_server.push(
                &mut self.rng,
                &self.knobs,
                Frame {
                    at,
                    imm: t.imm,
                    bytes: out,
                },
            );
            id
        }))
    }

    fn record(&mut self, c: Completion<u64>, frame: &[u8]) {
        let r = c.result.map(|reply| match reply {
            Reply::InFrame { body, .. } => frame[body].to_vec(),
            Reply::Owned { body, .. } => body,
            Reply::Shared { body, .. } => body.to_vec(),
        });
        self.done.push((c.waiter, r));
    }

    /// Advances one tick: deliveries, application work, transmissions, timers.
    pub(super) fn step(&mut self) {
        self.tick += 1;
        let now = self.now();
        while let Some(f) = self.to_server.pop_due(self.tick) {
            assert!(
                self.server_recvs > 0,
                "RNR: frame arrived at the server with no receive posted"
            );
            self.server_recvs -= 1;
            if self.server_mute {
                self.server_recvs += 1;
                continue;
            }
            match self.server.handle_frame(now, f.imm, &f.bytes) {
                Some(inc) => self.dispatch(inc, &f.bytes),
                None => self.server_recvs += 1,
            }
        }
        self.settle();
        while self.app_calls.front().is_some_and(|a| a.due <= self.tick) {
            let a = self.app_calls.pop_front().expect("checked");
            // The request's slot goes back before the answer leaves (as in the driver).
            self.held_by_app -= 1;
            self.server_recvs += 1;
            let mut out = vec![0u8; self.frame];
            let msg = a.reply.as_ref().map(|b| Raw(b.clone()));
            let meta = MetadataMap::new();
            let r = msg
                .as_ref()
                .map(|m| (&meta, m as &dyn EncodeMessage))
                .map_err(|e| (*e).clone());
            if let Some(t) = self.server.respond(a.id, r, &mut out) {
                self.send_to_client(out, t.len, t.imm);
            }
        }
        loop {
            let mut out = vec![0u8; self.frame];
            let Some(t) = self.server.poll_transmit(&mut out) else {
                break;
            };
            self.send_to_client(out, t.len, t.imm);
        }
        self.settle();
        while let Some(f) = self.to_client.pop_due(self.tick) {
            assert!(
                self.client_recvs > 0,
                "RNR: frame arrived at the client with no receive posted"
            );
            self.client_recvs -= 1;
            if let Some(c) = self.client.handle_frame(now, f.imm, &f.bytes) {
                self.record(c, &f.bytes);
            }
            // Reposted at once (the reply's bytes were copied by `record`).
            self.client_recvs += 1;
            self.client.handle_tokens_returned(1);
            // The driver posts receives for a grown window before it sends.
            let w = self.client.window();
            self.peak_window = self.peak_window.max(w);
            if w > self.credits {
                self.client_recvs += w - self.credits;
                self.credits = w;
            }
        }
        self.client.handle_timeout(now);
        while let Some(c) = self.client.poll_completion() {
            self.record(c, &[]);
        }
        loop {
            let mut out = vec![0u8; self.frame];
            let Some(t) = self.client.poll_transmit(&mut out) else {
                break;
            };
            out.truncate(t.len);
            let at = self.tick + self.knobs.latency;
            self.to_server.push(
                &mut self.rng,
                &self.knobs,
                Frame {
                    at,
                    imm: t.imm,
                    bytes: out,
                },
            );
        }
        let budget = match self.policy {
            Some(_) => self.server.credit().reserved,
            None => self.credits,
        };
        assert!(self.server_recvs + self.held_by_app <= budget);
    }

    fn dispatch(&mut self, inc: Incoming, frame: &[u8]) {
        let bytes = match &inc.bytes {
            RequestBody::InFrame => frame,
            RequestBody::Owned(v) => v.as_slice(),
            RequestBody::Shared(b) => b,
        };
        let path = std::str::from_utf8(&bytes[inc.path.clone()])
            .unwrap_or("?")
            .to_string();
        let reply = (self.app)(&path, &bytes[inc.body.clone()]);
        // The application holds the request's receive slot until it answers.
        self.held_by_app += 1;
        self.app_calls.push_back(AppCall {
            due: self.tick + self.knobs.app_delay,
            id: inc.id,
            reply,
        });
    }

    fn send_to_client(&mut self, mut out: Vec<u8>, len: usize, imm: u32) {
        out.truncate(len);
        let at = self.tick + self.knobs.latency;
        self.to_client.push(
            &mut self.rng,
            &self.knobs,
            Frame {
                at,
                imm,
                bytes: out,
            },
        );
    }

    /// Steps until nothing is in flight or `max` ticks pass; returns whether idle.
    pub(super) fn run(&mut self, max: u64) -> bool {
        for _ in 0..max {
            self.step();
            if self.idle() {
                return true;
            }
        }
        false
    }

    pub(super) fn idle(&self) -> bool {
        self.to_server.q.is_empty()
            && self.to_client.q.is_empty()
            && self.app_calls.is_empty()
            && !self.client.wants_transmit()
            && !self.server.wants_transmit()
    }

    /// Everything returned to where it started: no calls, full credits, no buffers.
    pub(super) fn assert_quiescent(&self) {
        assert_eq!(self.client.calls(), 0, "client call table drained");
        assert_eq!(self.server.calls(), 0, "server call table drained");
        assert_eq!(
            self.client.free_tokens(),
            self.client.window(),
            "every token returned"
        );
        assert_eq!(self.server.buffered(), 0, "server buffers released");
        if self.policy.is_some() {
            assert_eq!(
                self.client.window(),
                self.server.credit().window(),
                "both ends agree on the window"
            );
            assert_eq!(self.server_recvs, self.server.credit().reserved);
        } else {
            assert_eq!(self.server_recvs, self.credits);
        }
    }
}
