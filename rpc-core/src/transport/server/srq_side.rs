//! The RC side of a server: one SRQ fed by one registered receive pool and one CQ
//! shared by every connection, the poller that reaps it, and the RC handshake.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use rpc_transport::msg::{handshake, ImmMode, Reader, RecvPool, SendRing};
use rpc_transport::{
    AccessFlags, CompletionQueue, Device, ProtectionDomain, ProviderKind, QpCap, QpEndpoint,
    QpInitAttr, QpType, SharedReceiveQueue, WcOpcode, WorkCompletion,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::credit_pool::{CreditPool, PeerCredit};
use super::handler::Served;
use super::liveness::serve_liveness;
use super::pending::Pending;
use super::rc_peer::{Dispatch, RcPeer};
use super::settings::ServerSettings;
use super::table_room;
use super::ud_side::UdSide;
use crate::engine::{CreditWindow, ReadOnce, ServerConfig, ServerConn, MIN_FRAME};
use crate::handshake::{
    asks_ud, check_soft_peer, decide, Availability, Capabilities, OldPeer, Policy, RcPolicy, Reject,
};
use crate::id_map::IdMap;
use crate::request::ConnAddrs;
use crate::transport::completion::serve_cq;
use crate::transport::lend_windows::{LendWindows, WINDOW_WRS};
use crate::transport::rendezvous::{SERVER_READ_WRS, UNKNOWN_MAX_READ};
use crate::transport::{lock, Error, DEFAULT_RC_RETRY};

/// Connections whose Reads wait for room in the server's pool, woken when regions
/// come back (a region may come back under any lock, so the waker only records and
/// notifies; the read pump task does the work).
#[derive(Default)]
pub(super) struct ReadWakeups {
    peers: Mutex<Vec<std::sync::Weak<RcPeer>>>,
    notify: Notify,
}

impl ReadWakeups {
    /// A waker for `peer`'s waiting Reads.
    pub(super) fn waker_for(self: &Arc<Self>, peer: std::sync::Weak<RcPeer>) -> std::task::Waker {
        let me = self.clone();
        crate::transport::rendezvous::waker(move || {
            lock(&me.peers).push(peer.clone());
            me.notify.notify_one();
        })
    }
}

/// Pumps the Reads of connections whose pool room came back, and runs the calls
/// they complete. Holds the server only while it works.
async fn read_pump(sh: std::sync::Weak<SrqSide>) {
    let Some(wakeups) = sh.upgrade().map(|s| s.read_wakeups.clone()) else {
        return;
    };
    loop {
        wakeups.notify.notified().await;
        let Some(sh) = sh.upgrade() else { return };
        if sh.closing.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let peers = std::mem::take(&mut *lock(&wakeups.peers));
        for peer in peers.iter().filter_map(std::sync::Weak::upgrade) {
            for call in peer.pump_reads() {
                call.run(&sh.served, false);
            }
        }
    }
}

/// What the accept loop, the handshakes and the receive loop share.
pub(super) struct SrqSide {
    /// Registered regions for responses lent by reference, shared by every
    /// connection (they share the PD, so regions are server-wide in any case).
    pub(super) lend_regions: rpc_transport::msg::RegionPool,
    /// Registered regions requests by reference are read into.
    pub(super) read_regions: rpc_transport::msg::RegionPool,
    pub(super) read_wakeups: Arc<ReadWakeups>,
    /// Starts [`read_pump`] once, with the first connection.
    pub(super) read_pump: std::sync::Once,
    /// The UD side, if the device could create it.
    pub(super) ud: Option<Arc<UdSide>>,
    pub(super) served: Arc<Served>,
    pub(super) conns: Mutex<IdMap<u32, Arc<RcPeer>>>,
    /// The SRQ's receives as credits, shared by every connection's window.
    pub(super) credits: Arc<CreditPool>,
    pub(super) pd: ProtectionDomain,
    pub(super) srq: Arc<SharedReceiveQueue>,
    pub(super) cq: Arc<CompletionQueue>,
    pub(super) pool: RecvPool,
    pub(super) kick: Notify,
    pub(super) closing: AtomicBool,
    /// The SRQ has [`LONE_ANSWER_SPARE`] receives beyond the credits: a batch's lone
    /// frame is answered uncorked ([`handle`]).
    pub(super) answer_lone_early: bool,
    pub(super) settings: ServerSettings,
}

/// Receives the SRQ holds beyond the credits (where the device has room), for the
/// one frame whose answer may leave before its receive is back ([`handle`]).
pub(super) const LONE_ANSWER_SPARE: u32 = 1;

/// The server's one poller: every connection's receives (through the SRQ) and sends.
pub(super) async fn receive_loop(sh: Arc<SrqSide>) {
    let mut calls = Vec::with_capacity(64);
    let mut corked = Vec::with_capacity(64);
    let (read_calls, queued) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(start_in_order(queued, sh.served.clone()));
    let (mode, closing) = (sh.settings.mode, &sh.closing);
    serve_cq(&sh.cq, mode, &sh.kick, closing, "server", |wcs| {
        handle(&sh, wcs, &mut calls, &read_calls, &mut corked)
    })
    .await;
}

/// Starts the requests by reference `handle` queues, each run inline here until it
/// first waits: off the receive loop, yet started in order of arrival (a task per
/// call would start them in whatever order the workers pick them up). Ends with
/// the receive loop (the sender's owner).
async fn start_in_order(
    mut queued: tokio::sync::mpsc::UnboundedReceiver<Dispatch>,
    served: Arc<Served>,
) {
    while let Some(call) = queued.recv().await {
        call.run(&served, true);
    }
}

/// Handles a batch of completions; complete requests collect in `calls` and run once
/// the connection table's lock is released. Every connection the batch touches is
/// corked until its inline answers are in, so they leave as one post list; a batch
/// of one frame corks nothing (its answer leaves at once).
///
/// Requests whose body came by reference (`read_calls`, completed by their Read) are
/// queued for `start_in_order`, never run on this loop: their handler decodes, and
/// usually answers with, a body above the rendezvous threshold (up to the max
/// message, 64 MiB and more), and run here that work would hold up every
/// connection's small calls (`tests/tests/large_fairness.rs`).
fn handle(
    sh: &Arc<SrqSide>,
    wcs: &[WorkCompletion],
    calls: &mut Vec<Dispatch>,
    read_calls: &tokio::sync::mpsc::UnboundedSender<Dispatch>,
    corked: &mut Vec<Arc<RcPeer>>,
) {
    // Read only if a frame needs the time (a streaming call's deadline).
    let now = ReadOnce::default();
    let batch = sh.pool.batch();
    // A lone frame (one call at a time) is answered as soon as its handler is done:
    // its cleanup and its receive's repost follow the answer instead of delaying it.
    // Until that repost the client may spend the answer's credit on a frame that
    // finds the receive missing; the SRQ's spare receive is there for it (one frame
    // per batch, and the batch reposts before the next: `engine::wire`, "Why RNR
    // stays impossible").
    let lone = sh.answer_lone_early && wcs.iter().filter(|wc| is_receive(wc)).count() == 1;
    let conns = lock(&sh.conns);
    for wc in wcs {
        let conn = conns.get(&wc.qp_num);
        if let Some(c) = conn.filter(|_| !lone) {
            if !corked.iter().any(|k| Arc::ptr_eq(k, c)) {
                c.cork();
                corked.push(c.clone());
            }
        }
        if is_receive(wc) {
            let slot = sh.pool.complete(wc);
            match (conn, slot) {
                (Some(c), Ok(slot)) => {
                    calls.extend(c.on_frame(&now, slot.imm().unwrap_or(0), slot));
                }
                (Some(c), Err(_)) => c.kill(),
                // A connection already gone: the slot goes back to the pool.
                (None, _) => {}
            }
        } else if let Some(c) = conn {
            // A Read of a request by reference may complete its call.
            for call in c.on_send_completion(wc) {
                // Only when the server stops is the queue gone (its calls end with
                // their connections).
                let _ = read_calls.send(call);
            }
        }
    }
    drop(conns);
    for call in calls.drain(..) {
        call.run(&sh.served, sh.settings.inline);
    }
    // The batch's receives (of frames read here, and of requests answered inline)
    // go back before any corked answer leaves: an answer returns its frame's
    // credit, and the client may spend it at once (`engine::wire`, "Why RNR stays
    // impossible"; siw, which has no RNR retry, closes the connection on a frame
    // that finds the SRQ empty).
    drop(batch);
    for c in corked.drain(..) {
        c.uncork();
    }
}

fn is_receive(wc: &WorkCompletion) -> bool {
    matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
}

/// Completes after `t` if the peer has sent no frame on its queue pair by then
/// (it never proved its RDMA path: a client sends a `WANT` at once); otherwise never.
async fn unproven_after(conn: &RcPeer, t: std::time::Duration) {
    tokio::time::sleep(t).await;
    if conn.proven() {
        std::future::pending::<()>().await;
    }
}

/// On the soft provider, refuses a hello whose QP address is not on the host the
/// connection came from: connecting to it would dial wherever the hello points
/// (`handshake::check_soft_peer`). Verbs devices pass.
fn soft_peer_only(dev: &Device, endpoint: &QpEndpoint, addrs: &ConnAddrs) -> Result<(), Reject> {
    if dev.provider() != ProviderKind::Soft {
        return Ok(());
    }
    let (Some(peer), Some(local)) = (addrs.remote(), addrs.local()) else {
        return Err(Reject::ForeignAddress);
    };
    check_soft_peer(&endpoint.gid, peer.ip(), local.ip())
}

/// The server half of the handshake, then the liveness watch.
pub(super) async fn accept(
    sh: Arc<SrqSide>,
    mut tcp: TcpStream,
    pending: Pending,
) -> Result<(), Error> {
    sh.settings.tcp.apply(&tcp)?;
    let addrs = ConnAddrs::of(&tcp);
    let t = sh.settings.handshake_timeout;
    let hello = tokio::select! {
        r = tokio::time::timeout(t, handshake::recv(&mut tcp)) => r
            .map_err(|_| Error::new(format!("no hello within {t:?}; connection closed")))?,
        () = pending.evicted() => return Err(Error::new(
            "too many connections without a hello; the longest waiting was closed",
        )),
    };
    // The peer spoke: it no longer counts against the handshakes in progress.
    drop(pending);
    let hello = match hello {
        Ok(h) => h,
        Err(e) => {
            if let Some(old) = OldPeer::recognize(&e) {
                tcp.write_all(&old.refusal()).await?;
                return Err(Error::new(old.to_string()));
            }
            return Err(e.into());
        }
    };
    if let Err(no) = soft_peer_only(sh.pd.device(), &hello.endpoint, &addrs) {
        handshake::send(&mut tcp, &QpEndpoint::default(), &no.encode()).await?;
        return Err(Error::new(format!(
            "{no} (hello names {}, connection from {:?}); refused",
            hello.endpoint.gid,
            addrs.remote()
        )));
    }
    if let (Some(ud), true) = (&sh.ud, asks_ud(&hello.payload)) {
        return ud.clone().accept(tcp, hello, addrs).await;
    }
    let s = &sh.settings;
    let policy = Policy {
        // `s.credits` calls in flight, plus the credit clients keep for CANCEL frames:
        // the largest window (a peer with `CREDIT_WINDOWS` starts at 2).
        rc: s.ud.accept_rc.then_some(RcPolicy {
            credits: s.credits + 1,
            slot_size: s.slot_size as u32,
        }),
        ud: None,
        max_message: s.max_message as u64,
        capabilities: Capabilities::SUPPORTED,
        device: Some(sh.pd.device().caps()),
    };
    let now = Availability {
        receive_credits_free: sh.credits.free(),
        ud_sessions_open: 0,
    };
    let mut decision = decide(&hello.payload, &policy, &now).into_rc();
    if let Ok((_, grant)) = &decision {
        if let Err(no) = sh.credits.admit(grant.credits) {
            decision = Err(no);
        }
    }
    let (ask, grant) = match decision {
        Ok(x) => x,
        Err(no) => {
            handshake::send(&mut tcp, &QpEndpoint::default(), &no.encode()).await?;
            return Err(Error::new(no.to_string()));
        }
    };
    let credits = grant.credits;
    let by_ref = grant.capabilities.contains(Capabilities::RDMA_READ);
    if by_ref {
        let weak = Arc::downgrade(&sh);
        sh.read_pump.call_once(|| {
            tokio::spawn(read_pump(weak));
        });
    }
    let local = tcp.local_addr()?.ip();
    // The window's cap: what the client asked for, at most the server's setting.
    let max_window = ask.credits.min(s.credits + 1).max(credits);
    let window = if grant.capabilities.contains(Capabilities::CREDIT_WINDOWS) {
        CreditWindow::dynamic(credits, max_window)
    } else {
        CreditWindow::fixed(credits)
    };
    let setup = || -> Result<_, Error> {
        let mut init = QpInitAttr::new(QpType::Rc, &sh.cq, &sh.cq);
        init.srq = Some(&sh.srq);
        init.cap = QpCap {
            max_send_wr: window.max() + SERVER_READ_WRS + WINDOW_WRS,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let qp = Arc::new(sh.pd.create_qp(&init)?);
        let psn = qp.qp_num() & 0x00ff_ffff;
        // Named by the address the client reached us at (before connecting: the QP
        // introduces itself to the peer by it).
        let endpoint = qp.endpoint_via(psn, local)?;
        // Bodies by reference: the client reads the regions this side lends.
        let access = if by_ref {
            AccessFlags::REMOTE_READ
        } else {
            AccessFlags::empty()
        };
        qp.accept_rc_with(&hello.endpoint, psn, access, DEFAULT_RC_RETRY)?;
        // Sized to the window granted now: a peer that has not proven its RDMA path
        // holds two slots; the ring grows with the window.
        // In the SRQ pool's mode, which the grant told the client (`decide`).
        let mode = ImmMode::for_caps(&sh.pd.device().caps());
        let ring = SendRing::with_mode(&sh.pd, qp.clone(), credits, s.slot_size, mode)?;
        let frame = ring.slot_size();
        if frame < MIN_FRAME {
            return Err(Error::new(format!(
                "slot size {} leaves {frame} bytes per frame after the immediate's header; \
                 at least {MIN_FRAME} are needed",
                s.slot_size
            )));
        }
        let mut engine = ServerConn::new(ServerConfig {
            frame_size: frame,
            max_recv_message: s.max_message,
            max_send_message: s.max_message.min(ask.max_message as usize),
            buffer_cap: 2 * s.max_message + s.slot_size,
        });
        engine.set_credit(window);
        engine.set_stream_window(s.stream_window);
        let credit = PeerCredit {
            pool: sh.credits.clone(),
            pd: sh.pd.clone(),
        };
        let reads = by_ref.then(|| {
            engine.set_rendezvous(s.rendezvous_threshold);
            // This side's limit on one Read (the requester's; the client's device
            // serves any length its region has).
            let piece = sh
                .pd
                .device()
                .caps()
                .max_msg_size
                .unwrap_or(UNKNOWN_MAX_READ);
            Reader::new(qp.clone(), sh.read_regions.clone(), piece, SERVER_READ_WRS)
        });
        let conn = Arc::new_cyclic(|me| {
            let reads = reads.map(|r| {
                let waker = sh.read_wakeups.waker_for(me.clone());
                let on = sh.lend_regions.access().contains(AccessFlags::MW_BIND);
                let windows = LendWindows::new(qp.clone(), on)
                    .lending_in_place(grant.capabilities.contains(Capabilities::GATHER_LISTS));
                (r, sh.lend_regions.clone(), waker, windows)
            });
            RcPeer::new(engine, ring, addrs, s.concurrency_limit, credit, reads)
        });
        Ok((qp, endpoint, conn))
    };
    let (qp, endpoint, conn) = match setup() {
        Ok(x) => x,
        Err(e) => {
            sh.credits.leave(credits);
            return Err(e);
        }
    };
    let qpn = qp.qp_num();
    lock(&sh.conns).insert(qpn, conn.clone());
    // Every exit from here hands the connection's reservation back once.
    let release = |sh: &SrqSide| {
        let mut conns = lock(&sh.conns);
        conns.remove(&qpn);
        table_room::give_back_room(&mut conns);
        drop(conns);
        conn.kill();
        sh.credits.leave(conn.credit_reserved());
    };
    drop(qp);
    if let Err(e) = handshake::send(&mut tcp, &endpoint, &grant.encode()).await {
        release(&sh);
        return Err(e.into());
    }
    tracing::debug!(qpn, credits, "client connected");
    let proof_timeout = sh.settings.handshake_timeout;
    let peer = tcp.peer_addr().ok();
    let stop = async {
        tokio::select! {
            () = conn.shutdown.notified() => {}
            () = unproven_after(&conn, proof_timeout) => {
                tracing::info!(
                    ?peer,
                    ?proof_timeout,
                    "peer sent no frame on its queue pair in time; connection closed"
                );
            }
        }
    };
    serve_liveness(tcp, sh.settings.live, conn.goaway.notified(), stop).await;
    // The client is gone (or the server stops): reclaim its QP, slots and credits.
    release(&sh);
    tracing::debug!(qpn, "client disconnected");
    Ok(())
}
