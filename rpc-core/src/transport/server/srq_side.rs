//! The RC side of a server: one SRQ fed by one registered receive pool and one CQ
//! shared by every connection, the poller that reaps it, and the RC handshake.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rpc_transport::msg::{handshake, Hello, RecvPool, SendRing};
use rpc_transport::{
    AccessFlags, CompletionQueue, ProtectionDomain, QpCap, QpInitAttr, QpType, SharedReceiveQueue,
    WcOpcode, WorkCompletion,
};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::rc_peer::{Dispatch, SConn};
use super::routes::Routes;
use super::settings::ServerSettings;
use super::ud_side::UdSide;
use crate::engine::{ServerConfig, ServerConn};
use crate::id_map::IdMap;
use crate::transport::completion::serve_cq;
use crate::transport::{lock, Error};

/// What the accept loop, the handshakes and the receive loop share.
pub(super) struct Shared {
    /// The UD side, if the device could create it.
    pub(super) ud: Option<Arc<UdSide>>,
    pub(super) routes: Arc<Routes>,
    pub(super) conns: Mutex<IdMap<u32, Arc<SConn>>>,
    pub(super) granted: Mutex<u32>,
    pub(super) pool_slots: u32,
    pub(super) pd: ProtectionDomain,
    pub(super) srq: Arc<SharedReceiveQueue>,
    pub(super) cq: Arc<CompletionQueue>,
    pub(super) pool: RecvPool,
    pub(super) kick: Notify,
    pub(super) closing: AtomicBool,
    pub(super) settings: ServerSettings,
}

/// The server's one poller: every connection's receives (through the SRQ) and sends.
pub(super) async fn receive_loop(sh: Arc<Shared>) {
    let mut calls = Vec::with_capacity(64);
    let mut corked = Vec::with_capacity(64);
    let (mode, closing) = (sh.settings.mode, &sh.closing);
    serve_cq(&sh.cq, mode, &sh.kick, closing, "server", |wcs| {
        handle(&sh, wcs, &mut calls, &mut corked)
    })
    .await;
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
pub(super) async fn accept(sh: Arc<Shared>, mut tcp: TcpStream) -> Result<(), Error> {
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
