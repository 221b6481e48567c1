//! `Router`: a server with its services, and its accept loop.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpc_transport::msg::{self, RecvPool, RecvTarget};
use rpc_transport::SrqInitAttr;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::layer::util::Identity;
use tower::Layer;

use super::credit_pool::CreditPool;
use super::handler::Served;
use super::log_limit::RateLimit;
use super::pending::PendingHandshakes;
use super::rc_peer::RcPeer;
use super::settings::ServerSettings;
use super::srq_side::{accept, receive_loop, SrqSide, LONE_ANSWER_SPARE};
use super::ud_side::{UdSide, UdSideConfig};
use crate::id_map::IdMap;
use crate::server::{CallService, RoutableService};
use crate::service::Routes;
use crate::transport::heap_release;
use crate::transport::{lock, Error};

/// A server with services added; `L` is its stack of
/// [`Server::layer`](super::Server::layer)s.
pub struct Router<L = Identity> {
    pub(super) settings: ServerSettings,
    pub(super) routes: Routes,
    pub(super) layer: L,
}

/// First wait after a failed `accept`, doubled per further failure up to the max.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// One log line a second at most for failed accepts, and for refused handshakes.
static ACCEPT_LOG: RateLimit = RateLimit::new(Duration::from_secs(1));
static HANDSHAKE_LOG: RateLimit = RateLimit::new(Duration::from_secs(1));

impl<L> std::fmt::Debug for Router<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

impl<L> Router<L> {
    /// Adds another service (see [`Server::add_service`](super::Server::add_service)).
    pub fn add_service<S: RoutableService>(mut self, svc: S) -> Self {
        self.routes.add(svc);
        self
    }

    /// Adds `svc` if it is `Some`; with `None` the service is absent, and its calls
    /// end `UNIMPLEMENTED`.
    pub fn add_optional_service<S: RoutableService>(self, svc: Option<S>) -> Self {
        match svc {
            Some(svc) => self.add_service(svc),
            None => self,
        }
    }
}

impl<L> Router<L>
where
    L: Layer<Routes>,
    L::Service: CallService,
{
    /// Serves on `addr` until an error.
    pub async fn serve(self, addr: SocketAddr) -> Result<(), Error> {
        self.serve_with_shutdown(addr, std::future::pending()).await
    }

    /// Serves on `addr` until `signal` completes; then drains as tonic does: accepts
    /// no more connections, tells every client GOAWAY (its channel starts new calls
    /// elsewhere), lets calls in flight finish for the grace period
    /// ([`Server::shutdown_grace_period`](super::Server::shutdown_grace_period),
    /// default 10 s), cancels what still runs, closes every connection and returns.
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
        tracing::debug!(addr = ?listener.local_addr(), "rdma-rpc server listening");
        // Peers reach the default device wherever they reach the listener.
        let device_ip = listener.local_addr()?.ip();
        let incoming = futures_util::stream::poll_fn(move |cx| {
            listener
                .poll_accept(cx)
                .map(|r| Some(r.map(|(tcp, _)| tcp)))
        });
        self.serve_incoming(incoming, signal, device_ip).await
    }

    /// Serves the handshake connections `incoming` yields until it ends, as tonic's
    /// (see [`Router::serve_with_incoming_shutdown`]).
    pub async fn serve_with_incoming<I, IE>(self, incoming: I) -> Result<(), Error>
    where
        I: futures_util::Stream<Item = Result<tokio::net::TcpStream, IE>>,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.serve_with_incoming_shutdown(incoming, std::future::pending())
            .await
    }

    /// Serves the handshake connections `incoming` yields (accepted TCP
    /// connections, as tonic's `serve_with_incoming` takes: tonic's `TcpIncoming`,
    /// or `tokio_stream::wrappers::TcpListenerStream`) until `signal` completes or
    /// `incoming` ends; then drains as [`Router::serve_with_shutdown`]. A stream
    /// error (out of descriptors, say) is logged and followed by a short backoff.
    ///
    /// Unlike tonic's, the connections must be TCP streams: each is the handshake
    /// and liveness connection of an RDMA connection, whose ends are the request's
    /// `remote_addr`/`local_addr`; a Unix socket or an in-memory pipe cannot be.
    /// The default soft device then serves every local address (`0.0.0.0`), since
    /// where the connections were accepted is not known: a QP still names the
    /// address its peer reached the server at.
    pub async fn serve_with_incoming_shutdown<I, IE, F>(
        self,
        incoming: I,
        signal: F,
    ) -> Result<(), Error>
    where
        I: futures_util::Stream<Item = Result<tokio::net::TcpStream, IE>>,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
        F: Future<Output = ()>,
    {
        let any = std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
        self.serve_incoming(incoming, signal, any).await
    }

    /// Serves `incoming`; the default device (if no device was set) serves
    /// `device_ip`.
    async fn serve_incoming<I, IE, F>(
        self,
        incoming: I,
        signal: F,
        device_ip: std::net::IpAddr,
    ) -> Result<(), Error>
    where
        I: futures_util::Stream<Item = Result<tokio::net::TcpStream, IE>>,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
        F: Future<Output = ()>,
    {
        use futures_util::StreamExt as _;
        let s = self.settings;
        let s_pending = s.max_pending_handshakes;
        let grace = s.shutdown_grace;
        let dev = match (&s.rdma_device, s.device.as_deref()) {
            (Some(d), _) => d.clone(),
            (None, Some(name)) => msg::open_device(Some(name))?,
            (None, None) => rpc_transport::Device::open_default_on(device_ip)?,
        };
        let pd = dev.alloc_pd()?;
        let max_srq_wr = dev.attr().max_srq_wr.max(1);
        let pool_slots = s.pool_slots.min(max_srq_wr);
        // The credits' receives, and one more where the device has room: the spare
        // lets a lone frame's answer leave before its receive is back
        // (`srq_side::handle`).
        let receives = (pool_slots + LONE_ANSWER_SPARE).min(max_srq_wr);
        let answer_lone_early = receives > pool_slots;
        let srq = Arc::new(pd.create_srq(&SrqInitAttr {
            max_wr: receives,
            max_sge: 1,
            srq_limit: 0,
        })?);
        // Receives of the whole pool plus every ring's sends (each ring is at most
        // its connection's window, and the windows sum to the pool).
        // And the RDMA Reads of requests by reference, a few per connection.
        let reads = crate::transport::rendezvous::SERVER_READ_WRS as usize * s.max_connections;
        // And the memory-window binds and invalidations of bodies lent, a few per connection.
        let windows = crate::transport::lend_windows::WINDOW_WRS as usize * s.max_connections;
        let extra = (reads + windows).min(1 << 17) as u32;
        let cq = Arc::new(dev.create_cq(2 * receives + 64 + extra)?);
        // Shared by every connection: framed in this device's mode (`handshake::device`).
        let pool = RecvPool::with_mode(
            &pd,
            RecvTarget::Srq(srq.clone()),
            receives,
            s.slot_size,
            None,
            rpc_transport::msg::ImmMode::for_caps(&dev.caps()),
        )?;
        tracing::info!(
            provider = %dev.provider(),
            device = dev.name(),
            pool_slots,
            slot_size = s.slot_size,
            "rdma-rpc server listening"
        );
        let stack = self.layer.layer(self.routes.clone());
        let trace = s.trace.clone();
        let served = Arc::new(Served::new(
            self.routes,
            stack,
            s.timeout,
            s.load_shed,
            trace,
        ));
        let config = UdSideConfig {
            ud: s.ud,
            live: s.live,
            mode: s.mode,
            max_message: s.max_message,
            inline: s.inline,
            concurrency_limit: s.concurrency_limit,
            ud_stats: s.ud_stats.as_ref(),
        };
        let ud = match UdSide::new(&pd, served.clone(), config) {
            Ok(u) => Some(u),
            Err(e) => {
                tracing::warn!(error = %e.detailed(), "UD sessions not served");
                None
            }
        };
        // Half for responses lent, half for requests read: a response waiting for
        // room never holds memory a request's Read needs, nor the reverse.
        // Lent regions are read through a memory window per body where the device
        // has them (`lend_windows`); regions read into are never read by a peer.
        let half = s.rendezvous_pool_bytes / 2;
        let lend = crate::transport::lend_windows::lend_access(dev.caps().mw_type2);
        let lend_regions = rpc_transport::msg::RegionPool::with_access(&pd, half, lend);
        // Regions read into grant no remote access of their own; with windows they
        // may be bound (over exactly the bytes a response sends on where they lie).
        let read_access = match dev.caps().mw_type2 {
            true => rpc_transport::AccessFlags::LOCAL_WRITE | rpc_transport::AccessFlags::MW_BIND,
            false => rpc_transport::AccessFlags::LOCAL_WRITE,
        };
        let read_regions = rpc_transport::msg::RegionPool::with_access(&pd, half, read_access);
        if let Some(stats) = &s.rendezvous_stats {
            stats.watch(&lend_regions);
            stats.watch(&read_regions);
        }
        let shared = Arc::new(SrqSide {
            lend_regions,
            read_regions,
            read_wakeups: Default::default(),
            read_pump: std::sync::Once::new(),
            ud: ud.clone(),
            served,
            conns: Mutex::new(IdMap::default()),
            credits: Arc::new(CreditPool::new(pool_slots, s.max_connections)),
            pd,
            srq,
            cq,
            pool,
            kick: Notify::new(),
            closing: AtomicBool::new(false),
            answer_lone_early,
            settings: s,
        });
        let poller = tokio::spawn(receive_loop(shared.clone()));
        let ud_poller = ud.map(|u| tokio::spawn(u.run()));
        tokio::pin!(signal);
        // Boxed, not pinned in place: dropped (the listener closed) before the drain.
        let mut incoming = Box::pin(incoming);
        let pending = PendingHandshakes::new(s_pending);
        let mut accept_backoff = ACCEPT_BACKOFF_MIN;
        loop {
            tokio::select! {
                () = &mut signal => break,
                r = incoming.next() => match r {
                    None => break,
                    Some(Ok(tcp)) => {
                        // Formatted only if logged: one allocation fewer per connection.
                        let peer = tcp.peer_addr().ok();
                        accept_backoff = ACCEPT_BACKOFF_MIN;
                        let waiting = pending.enter();
                        let sh = shared.clone();
                        tokio::spawn(async move {
                            if let Err(e) = accept(sh, tcp, waiting).await {
                                if let Some(more) = HANDSHAKE_LOG.allow() {
                                    let peer = peer.map_or_else(|| "unknown".into(), |a| a.to_string());
                                    tracing::info!(%peer, error = %e.detailed(), more, "handshake refused or failed");
                                }
                            }
                            heap_release::connection_closed();
                        });
                    }
                    Some(Err(e)) => {
                        let e = e.into();
                        // Out of descriptors or buffers (EMFILE, ENFILE, ENOBUFS):
                        // retrying at once would spin; back off, and say so once a
                        // second at most.
                        if let Some(more) = ACCEPT_LOG.allow() {
                            tracing::warn!(error = %e, more, backoff = ?accept_backoff, "accept failed; backing off");
                        }
                        tokio::select! {
                            () = &mut signal => break,
                            () = tokio::time::sleep(accept_backoff) => {}
                        }
                        accept_backoff = (accept_backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    }
                },
            }
        }
        // Drain: no new connections (the listener is no longer read, and closed
        // here); every client hears GOAWAY and starts no new call on
        // its connection; calls in flight run to their answers, for the grace
        // period at most.
        drop(incoming);
        drain(&shared, grace).await;
        shared.closing.store(true, Ordering::Release);
        shared.kick.notify_one();
        if let Some(u) = &shared.ud {
            u.stop();
        }
        let conns: Vec<Arc<RcPeer>> = lock(&shared.conns).drain().map(|(_, c)| c).collect();
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

/// Tells every client GOAWAY, then waits until every client has let go of its
/// connection (a client closes a draining connection once its calls there are
/// answered), for `grace` at most: what is still open is then closed by the
/// teardown, and its calls end `UNAVAILABLE`.
async fn drain(sh: &SrqSide, grace: Duration) {
    if let Some(u) = &sh.ud {
        u.goaway();
    }
    let idle = || lock(&sh.conns).is_empty() && sh.ud.as_ref().is_none_or(|u| u.idle());
    let deadline = tokio::time::Instant::now() + grace;
    // Checked every few milliseconds: a drain happens once per server, and the
    // connections' tasks have no single event for "all gone". Each round tells
    // GOAWAY again to every connection, so that one whose handshake was still under
    // way when the drain began hears it too (a connection told twice sends it once).
    loop {
        for p in lock(&sh.conns).values() {
            p.goaway.notify_one();
        }
        if idle() || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if !idle() {
        tracing::warn!(
            ?grace,
            "connections still open after the shutdown grace period; closing them"
        );
    }
}
