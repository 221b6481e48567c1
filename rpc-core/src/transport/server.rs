//! `Server`: the builder, the router, the accept loop and the shared receive path.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rpc_transport::msg::{self, handshake, Hello, RecvPool, RecvTarget, SendRing};
use rpc_transport::{
    AccessFlags, CompletionQueue, ProtectionDomain, QpCap, QpInitAttr, QpType, SharedReceiveQueue,
    SrqInitAttr, WcOpcode, WorkCompletion,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tower::Service;

use super::lock;
use crate::engine::{ServerConfig, ServerConn};
use crate::id_map::IdMap;
use crate::server::{NamedService, ServerCall, ServerReply};
use crate::transport::poll::{self, CompletionMode};
// Re-exported for the connection drivers, which name it through this module.
pub(crate) use crate::transport::routes::Routes;
use crate::transport::server_conn::{Dispatch, SConn};
use crate::transport::ud_server::{UdSettings, UdSide, UdStatsHandle};
use crate::transport::{Error, DEFAULT_CREDITS, DEFAULT_MAX_MESSAGE, DEFAULT_SLOT_SIZE};

#[derive(Debug, Clone)]
struct ServerSettings {
    credits: u32,
    slot_size: usize,
    pool_slots: u32,
    max_message: usize,
    mode: CompletionMode,
    device: Option<String>,
    inline: bool,
    rdma_device: Option<rpc_transport::Device>,
    ud: UdSettings,
    ud_stats: Option<UdStatsHandle>,
}

/// Builds and runs a server.
#[derive(Debug)]
pub struct Server {
    settings: ServerSettings,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            settings: ServerSettings {
                credits: DEFAULT_CREDITS,
                slot_size: DEFAULT_SLOT_SIZE,
                pool_slots: 16 * (DEFAULT_CREDITS + 1),
                max_message: DEFAULT_MAX_MESSAGE,
                mode: CompletionMode::default(),
                device: None,
                inline: true,
                rdma_device: None,
                ud: UdSettings {
                    window: 32,
                    max_sessions: 4096,
                    recv_slots: 1024,
                    accept_rc: true,
                },
                ud_stats: None,
            },
        }
    }
}

/// A server with services added.
pub struct Router {
    settings: ServerSettings,
    routes: Routes,
}

impl Server {
    /// A server with default settings.
    pub fn builder() -> Server {
        Server::default()
    }

    /// Most calls in flight on one connection (its credits, less the one clients keep
    /// for CANCEL frames).
    pub fn credits_per_connection(mut self, n: u32) -> Self {
        self.settings.credits = n.max(1);
        self
    }

    /// Receive slots in the shared pool (SRQ): the sum of all connections' credits.
    /// A connection that would exceed it is refused at the handshake.
    pub fn receive_pool_slots(mut self, n: u32) -> Self {
        self.settings.pool_slots = n.max(1);
        self
    }

    /// Frame (slot) size in bytes for every connection.
    pub fn slot_size(mut self, bytes: usize) -> Self {
        self.settings.slot_size = bytes.max(crate::engine::MIN_FRAME);
        self
    }

    /// Largest message accepted or sent (beyond: `RESOURCE_EXHAUSTED`).
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.settings.max_message = bytes;
        self
    }

    /// How completions are reaped.
    pub fn completion_mode(mut self, mode: CompletionMode) -> Self {
        self.settings.mode = mode;
        self
    }

    /// Opens this RDMA device instead of the default one.
    pub fn device(mut self, name: impl Into<String>) -> Self {
        self.settings.device = Some(name.into());
        self
    }

    /// Whether a handler starts on the server's completion task and is spawned only
    /// if it has to wait (default), or is spawned as a task at once. Inline start
    /// saves a spawn per call for handlers that answer without waiting; a handler
    /// that computes for long before its first `.await` then delays the other calls,
    /// so turn this off (or use `spawn_blocking`) for such services.
    pub fn inline_handlers(mut self, inline: bool) -> Self {
        self.settings.inline = inline;
        self
    }

    /// Serves on this already opened device (e.g. a soft device whose UD faults a
    /// test sets) instead of opening one.
    pub fn rdma_device(mut self, dev: rpc_transport::Device) -> Self {
        self.settings.rdma_device = Some(dev);
        self
    }

    /// Whether RC connections are accepted (default yes). Without, only UD sessions
    /// are served, and a UD client's call too big for a datagram fails
    /// `RESOURCE_EXHAUSTED` naming the UD payload limit.
    pub fn accept_rc(mut self, yes: bool) -> Self {
        self.settings.ud.accept_rc = yes;
        self
    }

    /// Most UD sessions open at once (default 4096); beyond, a UD handshake is
    /// refused naming the limit. Each session's state is bounded by its window.
    pub fn max_ud_sessions(mut self, n: u32) -> Self {
        self.settings.ud.max_sessions = n;
        self
    }

    /// UD calls a session may have outstanding (default 32): each holds at most this
    /// many duplicate-suppression entries and as many stored replies of one datagram.
    pub fn ud_window(mut self, n: u32) -> Self {
        self.settings.ud.window = n.clamp(1, 1 << 16);
        self
    }

    /// Receives posted on the UD QP's own receive queue (default 1024).
    pub fn ud_receive_slots(mut self, n: u32) -> Self {
        self.settings.ud.recv_slots = n.max(1);
        self
    }

    /// Publishes the UD counters into `handle` while the server runs.
    pub fn ud_stats(mut self, handle: UdStatsHandle) -> Self {
        self.settings.ud_stats = Some(handle);
        self
    }

    /// Adds a service: a generated `<Svc>Server`, or any tower service of the same
    /// request and reply types, such as a [`tower::ServiceBuilder`] stack around
    /// one. Calls are routed by [`NamedService::NAME`]; each call runs on a clone of
    /// `svc` (no lock), made ready with `poll_ready` first, so middleware that holds
    /// state across clones (a concurrency limit's semaphore) applies to all calls.
    ///
    /// The service's errors end the call with the status that
    /// [`Status::from_error`](crate::Status::from_error) makes of them: a `Status`
    /// unchanged, a `timeout` layer's `Elapsed` as `DEADLINE_EXCEEDED`, a
    /// `load_shed` layer's `Overloaded` as `RESOURCE_EXHAUSTED`, anything else
    /// `UNKNOWN` with its text.
    ///
    /// `NamedService` is implemented for tower's middleware around a named service
    /// (`Timeout`, `ConcurrencyLimit`, `LoadShed`, `RateLimit`, the `util` adapters
    /// such as `MapErr`, and `Either` of two services of one name, which
    /// `ServiceBuilder::option_layer` builds). A middleware of your own implements it
    /// by forwarding to the service it wraps:
    ///
    /// ```
    /// use std::task::{Context, Poll};
    ///
    /// use rpc_core::server::{BoxFuture, NamedService, ServerCall, ServerReply};
    /// use rpc_core::Status;
    /// use tower::Service;
    ///
    /// /// Refuses calls without an `authorization` key.
    /// #[derive(Clone)]
    /// struct RequireAuth<S>(S);
    ///
    /// impl<S: NamedService> NamedService for RequireAuth<S> {
    ///     const NAME: &'static str = S::NAME;
    /// }
    ///
    /// impl<S> Service<ServerCall> for RequireAuth<S>
    /// where
    ///     S: Service<ServerCall, Response = ServerReply, Error = Status>,
    ///     S::Future: Send + 'static,
    /// {
    ///     type Response = ServerReply;
    ///     type Error = Status;
    ///     type Future = BoxFuture<ServerReply>;
    ///
    ///     fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
    ///         self.0.poll_ready(cx)
    ///     }
    ///
    ///     fn call(&mut self, call: ServerCall) -> Self::Future {
    ///         if call.metadata().get("authorization").is_none() {
    ///             return Box::pin(async { Err(Status::unauthenticated("no authorization")) });
    ///         }
    ///         Box::pin(self.0.call(call))
    ///     }
    /// }
    /// ```
    ///
    /// It stacks with tower's own layers:
    /// `add_service(ServiceBuilder::new().layer_fn(RequireAuth).timeout(d).service(svc))`.
    pub fn add_service<S>(self, svc: S) -> Router
    where
        S: Service<ServerCall, Response = ServerReply>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        S::Future: Send + 'static,
    {
        Router {
            settings: self.settings,
            routes: Routes::default(),
        }
        .add_service(svc)
    }
}

impl Router {
    /// Adds another service (see [`Server::add_service`]).
    pub fn add_service<S>(mut self, svc: S) -> Router
    where
        S: Service<ServerCall, Response = ServerReply>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        S::Future: Send + 'static,
    {
        self.routes.add(svc);
        self
    }

    /// Serves on `addr` until an error.
    pub async fn serve(self, addr: SocketAddr) -> Result<(), Error> {
        self.serve_with_shutdown(addr, std::future::pending()).await
    }

    /// Serves on `addr` until `signal` completes; then closes every connection
    /// (clients see `UNAVAILABLE`) and returns.
    pub async fn serve_with_shutdown<F: Future<Output = ()>>(
        self,
        addr: SocketAddr,
        signal: F,
    ) -> Result<(), Error> {
        let listener = TcpListener::bind(addr).await?;
        self.serve_with_listener(listener, signal).await
    }

    /// Serves connections from an already bound listener (lets a caller bind port 0
    /// and learn the address first) until `signal` completes.
    pub async fn serve_with_listener<F: Future<Output = ()>>(
        self,
        listener: TcpListener,
        signal: F,
    ) -> Result<(), Error> {
        let s = self.settings;
        let dev = match &s.rdma_device {
            Some(d) => d.clone(),
            None => msg::open_device(s.device.as_deref())?,
        };
        let pd = dev.alloc_pd()?;
        let pool_slots = s.pool_slots.min(dev.attr().max_srq_wr.max(1));
        let srq = Arc::new(pd.create_srq(&SrqInitAttr {
            max_wr: pool_slots,
            max_sge: 1,
            srq_limit: 0,
        })?);
        // Receives of the whole pool plus every ring's sends (rings sum to the pool).
        let cq = Arc::new(dev.create_cq(2 * pool_slots + 64)?);
        let pool = RecvPool::new(
            &pd,
            RecvTarget::Srq(srq.clone()),
            pool_slots,
            s.slot_size,
            None,
        )?;
        tracing::info!(
            addr = %listener.local_addr()?,
            provider = %dev.provider(),
            device = dev.name(),
            pool_slots,
            slot_size = s.slot_size,
            "rdma-rpc server listening"
        );
        let routes = Arc::new(self.routes);
        let ud = match UdSide::new(
            &pd,
            routes.clone(),
            s.mode,
            s.ud,
            s.max_message,
            s.ud_stats.as_ref(),
            s.inline,
        ) {
            Ok(u) => Some(u),
            Err(e) => {
                tracing::warn!(error = %e, "UD sessions not served");
                None
            }
        };
        let shared = Arc::new(Shared {
            ud: ud.clone(),
            routes,
            conns: Mutex::new(IdMap::default()),
            granted: Mutex::new(0),
            pool_slots,
            pd,
            srq,
            cq,
            pool,
            kick: Notify::new(),
            closing: AtomicBool::new(false),
            settings: s,
        });
        let poller = tokio::spawn(receive_loop(shared.clone()));
        let ud_poller = ud.map(|u| tokio::spawn(u.run()));
        tokio::pin!(signal);
        loop {
            tokio::select! {
                () = &mut signal => break,
                r = listener.accept() => match r {
                    Ok((tcp, peer)) => {
                        let sh = shared.clone();
                        tokio::spawn(async move {
                            if let Err(e) = accept(sh, tcp).await {
                                tracing::debug!(%peer, error = %e, "handshake failed");
                            }
                        });
                    }
                    Err(e) => tracing::debug!(error = %e, "accept failed"),
                },
            }
        }
        shared.closing.store(true, Ordering::Release);
        shared.kick.notify_one();
        if let Some(u) = &shared.ud {
            u.stop();
        }
        let conns: Vec<Arc<SConn>> = lock(&shared.conns).drain().map(|(_, c)| c).collect();
        for c in conns {
            c.kill();
            c.shutdown.notify_one();
        }
        let _ = poller.await;
        if let Some(p) = ud_poller {
            let _ = p.await;
        }
        Ok(())
    }
}

/// What the accept loop, the handshakes and the receive loop share.
struct Shared {
    /// The UD side, if the device could create it.
    ud: Option<Arc<UdSide>>,
    routes: Arc<Routes>,
    conns: Mutex<IdMap<u32, Arc<SConn>>>,
    granted: Mutex<u32>,
    pool_slots: u32,
    pd: ProtectionDomain,
    srq: Arc<SharedReceiveQueue>,
    cq: Arc<CompletionQueue>,
    pool: RecvPool,
    kick: Notify,
    closing: AtomicBool,
    settings: ServerSettings,
}

/// The server's one poller: every connection's receives (through the SRQ) and sends.
async fn receive_loop(sh: Arc<Shared>) {
    let mut wcs = [WorkCompletion::default(); 64];
    let mut calls = Vec::with_capacity(wcs.len());
    let mut corked = Vec::with_capacity(wcs.len());
    let mut waiter = poll::Waiter::default();
    while !sh.closing.load(Ordering::Acquire) {
        let r = waiter
            .wait(&sh.cq, sh.settings.mode, &mut wcs, &sh.kick)
            .await;
        match r {
            Ok(0) => {}
            Ok(n) => handle(&sh, &wcs[..n], &mut calls, &mut corked),
            Err(e) => {
                tracing::error!(error = %e, "server completion queue failed");
                return;
            }
        }
    }
}

/// Handles a batch of completions; complete requests collect in `calls` and run once
/// the connection table's lock is released. Every connection the batch touches is
/// corked until its inline answers are in, so they leave as one post list.
fn handle(
    sh: &Arc<Shared>,
    wcs: &[WorkCompletion],
    calls: &mut Vec<Dispatch>,
    corked: &mut Vec<Arc<SConn>>,
) {
    let now = Instant::now();
    let batch = sh.pool.batch();
    let conns = lock(&sh.conns);
    for wc in wcs {
        let conn = conns.get(&wc.qp_num);
        if let Some(c) = conn {
            if !corked.iter().any(|k| Arc::ptr_eq(k, c)) {
                c.cork();
                corked.push(c.clone());
            }
        }
        match wc.opcode {
            WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => {
                let slot = sh.pool.complete(wc);
                match (conn, slot) {
                    (Some(c), Ok(slot)) => {
                        calls.extend(c.on_frame(now, wc.imm_data.unwrap_or(0), slot));
                    }
                    (Some(c), Err(_)) => c.kill(),
                    // A connection already gone: the slot goes back to the pool.
                    (None, _) => {}
                }
            }
            _ => {
                if let Some(c) = conn {
                    c.on_send_completion(wc);
                }
            }
        }
    }
    drop(conns);
    for call in calls.drain(..) {
        call.run(&sh.routes, sh.settings.inline);
    }
    for c in corked.drain(..) {
        c.uncork();
    }
    // Last: the receive slots of requests answered inline go back in the same list.
    drop(batch);
}

/// The server half of the handshake, then the liveness watch.
async fn accept(sh: Arc<Shared>, mut tcp: TcpStream) -> Result<(), Error> {
    tcp.set_nodelay(true)?;
    let hello = handshake::recv(&mut tcp).await?;
    let s = &sh.settings;
    if hello.is_ud() || !s.ud.accept_rc {
        return match (&sh.ud, hello.is_ud()) {
            (Some(ud), true) => ud.clone().accept(tcp, hello).await,
            _ => {
                let mut no = hello;
                no.flags = handshake::FLAG_REJECTED
                    | handshake::FLAG_TRANSPORT_OFF
                    | (hello.flags & handshake::FLAG_UD);
                handshake::send(&mut tcp, &no).await?;
                if hello.is_ud() {
                    let ud = rpc_transport::msg::UdHello {
                        session: 0,
                        qkey: 0,
                        flags: 0,
                    };
                    handshake::send_ud(&mut tcp, &ud).await?;
                }
                Err(Error::new("this server does not accept that transport"))
            }
        };
    }
    // `s.credits` calls in flight, plus the credit clients keep for CANCEL frames.
    let credits = hello.credits.min(s.credits + 1).max(2);
    let granted = {
        let mut g = lock(&sh.granted);
        let ok = *g + credits <= sh.pool_slots;
        if ok {
            *g += credits;
        }
        ok
    };
    if !granted {
        let mut no = hello;
        no.flags = handshake::FLAG_REJECTED;
        handshake::send(&mut tcp, &no).await?;
        return Err(Error::new("receive pool fully granted; connection refused"));
    }
    let release = |sh: &Shared| *lock(&sh.granted) -= credits;
    let setup = || -> Result<_, Error> {
        let mut init = QpInitAttr::new(QpType::Rc, &sh.cq, &sh.cq);
        init.srq = Some(&sh.srq);
        init.cap = QpCap {
            max_send_wr: credits,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let qp = Arc::new(sh.pd.create_qp(&init)?);
        let psn = qp.qp_num() & 0x00ff_ffff;
        qp.connect_rc(&hello.endpoint, psn, AccessFlags::empty())?;
        let ring = SendRing::new(&sh.pd, qp.clone(), credits, s.slot_size)?;
        let engine = ServerConn::new(ServerConfig {
            frame_size: s.slot_size,
            max_recv_message: s.max_message,
            max_send_message: s.max_message.min(hello.max_message as usize),
            buffer_cap: 2 * s.max_message + s.slot_size,
        });
        Ok((qp, psn, Arc::new(SConn::new(engine, ring))))
    };
    let (qp, psn, conn) = match setup() {
        Ok(x) => x,
        Err(e) => {
            release(&sh);
            return Err(e);
        }
    };
    let qpn = qp.qp_num();
    lock(&sh.conns).insert(qpn, conn.clone());
    let reply = Hello {
        flags: 0,
        endpoint: qp.endpoint(psn)?,
        slot_size: s.slot_size as u32,
        credits,
        max_message: s.max_message as u64,
    };
    drop(qp);
    if let Err(e) = handshake::send(&mut tcp, &reply).await {
        lock(&sh.conns).remove(&qpn);
        release(&sh);
        return Err(e.into());
    }
    tracing::debug!(qpn, credits, "client connected");
    tokio::select! {
        () = handshake::closed(&mut tcp) => {}
        () = conn.shutdown.notified() => {}
    }
    // The client is gone (or the server stops): reclaim its QP, slots and credits.
    lock(&sh.conns).remove(&qpn);
    conn.kill();
    release(&sh);
    tracing::debug!(qpn, "client disconnected");
    Ok(())
}
