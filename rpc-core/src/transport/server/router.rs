//! `Router`: a server with its services, and its accept loop.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rpc_transport::msg::{self, RecvPool, RecvTarget};
use rpc_transport::SrqInitAttr;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::layer::util::Identity;
use tower::Layer;

use super::handler::Served;
use super::rc_peer::RcPeer;
use super::settings::ServerSettings;
use super::srq_side::{accept, receive_loop, SrqSide};
use super::ud_side::UdSide;
use crate::id_map::IdMap;
use crate::server::{CallService, RoutableService};
use crate::service::Routes;
use crate::transport::{lock, Error};

/// A server with services added; `L` is its stack of
/// [`Server::layer`](super::Server::layer)s.
pub struct Router<L = Identity> {
    pub(super) settings: ServerSettings,
    pub(super) routes: Routes,
    pub(super) layer: L,
}

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
        let stack = self.layer.layer(self.routes.clone());
        let served = Arc::new(Served::new(self.routes, stack, s.timeout));
        let ud = match UdSide::new(&pd, served.clone(), &s) {
            Ok(u) => Some(u),
            Err(e) => {
                tracing::warn!(error = %e, "UD sessions not served");
                None
            }
        };
        let shared = Arc::new(SrqSide {
            ud: ud.clone(),
            served,
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
