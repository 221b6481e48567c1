//! The UD link: one UD QP, send ring and receive pool per channel, and a session
//! opened over the handshake connection (which stays open as the liveness channel).
//!
//! Each call keeps its send slot until its reply arrives, so a retransmission reposts
//! the same bytes without copying; a slot posted several times is reused only once
//! all its sends completed. A reply is read in place from its receive slot. A call
//! too big for one datagram is the channel's business (`transport::channel`): it
//! goes over RC when the server accepts RC, else fails naming the limit.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use rpc_transport::msg::handshake;
use rpc_transport::msg::{RecvPool, RecvTarget, UdDestination, UdSendRing, UdSlot};
use rpc_transport::{AhAttr, QpCap, QpInitAttr, QpType, WcOpcode, WorkCompletion, GRH_LEN};

use super::conn::{Conn, Dial};
use super::dial::{dial, shared_device};
use super::link::{Link, NewCall, Signals, SlotPromises};
use super::{deliver, ReplySender};
use crate::engine::ud::{UdClient, UdClientConfig, UdCompletion};
use crate::engine::Reply;
use crate::handshake::{check_ud, device, ClientHello, HandshakeError, UdAsk, NO_UD};
use crate::status::Status;
use crate::transport::endpoint::Endpoint;
use crate::transport::ud_device::{datagram_limit, QKEY};
use crate::transport::Error;

/// A UD session's state: the engine, the send slots and the server's address.
pub(crate) struct UdLink {
    engine: UdClient<ReplySender, UdSlot>,
    ring: UdSendRing,
    promised: SlotPromises,
    dest: UdDestination,
    /// Whether the server also accepts RC connections (for calls too big for UD).
    accepts_rc: bool,
}

/// Opens a UD session: the handshake, then the QP, its slots and driver.
async fn connect(ep: &Endpoint) -> Result<Arc<Conn<UdLink>>, Error> {
    let s = &ep.settings;
    let (mut tcp, addr) = dial(ep).await?;
    let dev = shared_device(ep, &tcp)?;
    let caps = dev.caps();
    if !caps.ud {
        // Known before any QP: creating one would fail EOPNOTSUPP, for good. The
        // channel reads this and connects over RC instead (`transport::channel`).
        return Err(Error::new(format!("{} {NO_UD}", dev.name())));
    }
    let pd = dev.alloc_pd()?;
    let limit = datagram_limit(&dev)?;
    // Asked as payload: a device without immediates sends them in its head.
    let ask_datagram = limit - device::imm_mode(&caps, None).header_len();
    let window = s.ud_window.max(1);
    // Sends: a slot per call plus room for slots whose retransmissions are in flight.
    let (sends, recvs) = (2 * window, 2 * window);
    let cq = Arc::new(dev.create_cq(4 * sends + recvs + 16)?);
    let mut init = QpInitAttr::new(QpType::Ud, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: 4 * sends,
        max_recv_wr: recvs,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = Arc::new(pd.create_qp(&init)?);
    qp.activate_ud(QKEY, 0)?;
    let hello = ClientHello::new(UdAsk {
        window,
        datagram: ask_datagram as u32,
        max_message: s.max_message as u64,
        qkey: QKEY,
    })
    .with_device(caps);
    handshake::send(&mut tcp, &qp.endpoint(0)?, &hello.encode()).await?;
    let reply = handshake::recv(&mut tcp)
        .await
        .map_err(HandshakeError::from)?;
    let ud = check_ud(&hello, &reply.payload)?;
    let datagram = ud.datagram as usize;
    let window = ud.window;
    let mode = device::imm_mode(&caps, ud.device);
    let ah = Arc::new(pd.create_ah(&AhAttr::from_endpoint(
        &reply.endpoint,
        dev.preferred_gid_index(),
    ))?);
    // The granted datagram is payload; in header mode the immediate comes on top:
    // receives hold it beside the payload, and sends keep within this device's
    // limit.
    let header = mode.header_len();
    let pool = RecvPool::with_mode(
        &pd,
        RecvTarget::Qp(qp.clone()),
        recvs,
        GRH_LEN + datagram + header,
        None,
        mode,
    )?;
    let payload = datagram.min(limit - header);
    let ring = UdSendRing::with_mode(&pd, qp.clone(), sends, payload + header, mode)?;
    let link = UdLink {
        engine: UdClient::new(UdClientConfig::new(ud.session, window, payload)),
        ring,
        promised: SlotPromises::default(),
        dest: UdDestination {
            ah,
            qpn: reply.endpoint.qpn,
            qkey: ud.qkey,
        },
        accepts_rc: ud.accepts_rc,
    };
    tracing::debug!(peer = %addr, session = ud.session, window, datagram, "UD session open");
    let sig = Arc::new(Signals::default());
    Ok(Conn::spawn(link, sig, (pool, cq), s, tcp))
}

impl UdLink {
    /// The engine (its settings and counters).
    pub(crate) fn engine(&self) -> &UdClient<ReplySender, UdSlot> {
        &self.engine
    }

    /// Whether the server also accepts RC connections.
    pub(crate) fn accepts_rc(&self) -> bool {
        self.accepts_rc
    }

    /// Hands an ended call to its caller and its send slot back to the ring.
    fn finish(
        &mut self,
        c: UdCompletion<ReplySender, UdSlot>,
        slot: Option<rpc_transport::msg::RecvSlot>,
    ) {
        self.ring.release(c.slot);
        deliver(c.waiter, c.result, slot, GRH_LEN);
    }

    fn drain_completions(&mut self) -> bool {
        let mut ended = false;
        while let Some(c) = self.engine.poll_completion() {
            self.finish(c, None);
            ended = true;
        }
        ended
    }
}

impl Dial for UdLink {
    fn connect(ep: &Endpoint) -> impl Future<Output = Result<Arc<Conn<Self>>, Error>> + Send {
        connect(ep)
    }
}

impl Link for UdLink {
    fn dead(&self) -> Option<&Status> {
        self.engine.dead()
    }

    fn open_calls(&self) -> usize {
        self.engine.open_calls()
    }

    fn reserve(&mut self) -> bool {
        let engine = &mut self.engine;
        self.promised
            .take(self.ring.free_slots(), || engine.reserve())
    }

    fn reserved(&self) -> usize {
        self.promised.count()
    }

    fn unreserve(&mut self) {
        self.promised.redeem();
        self.engine.unreserve();
    }

    fn start(
        &mut self,
        _sig: &Signals,
        call: NewCall<'_>,
    ) -> Result<(u32, Option<Instant>), Status> {
        self.promised.redeem();
        let slot = self.ring.acquire().expect("reserved by poll_ready");
        let buf = self.ring.buf(&slot);
        let now = Instant::now();
        match self
            .engine
            .start_call(now, call.reply, slot, &call.head, call.body, buf)
        {
            Ok((id, t)) => {
                // The engine holds the slot; post it from there. A refused post is a
                // lost datagram, which the retransmission timer covers.
                let (engine, ring, dest) = (&self.engine, &mut self.ring, &self.dest);
                engine.with_slot(id, |slot| {
                    if let Err(e) = ring.post(slot, t.len, t.imm, dest) {
                        tracing::debug!(error = %e, "UD request not posted");
                    }
                });
                Ok((id, Some(now + engine.rto())))
            }
            Err((s, _reply, slot)) => {
                self.ring.release(slot);
                Err(s)
            }
        }
    }

    fn cancel(&mut self, sig: &Signals, id: u32) {
        if let Some(slot) = self.engine.cancel(id) {
            self.ring.release(slot);
        }
        sig.ready.wake_all();
    }

    fn handle(&mut self, wcs: &[WorkCompletion], pool: &RecvPool) -> bool {
        let now = Instant::now();
        let batch = pool.batch();
        let mut freed = false;
        for wc in wcs {
            match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => {
                    let slot = match pool.complete(wc) {
                        Ok(s) => s,
                        Err(status) => {
                            self.fail(Status::unavailable(format!("UD receive failed: {status}")));
                            continue;
                        }
                    };
                    if slot.len() < GRH_LEN || self.engine.dead().is_some() {
                        continue;
                    }
                    let imm = slot.imm().unwrap_or(0);
                    let c = self
                        .engine
                        .handle_datagram(now, imm, &slot.bytes()[GRH_LEN..]);
                    if let Some(c) = c {
                        let keep = matches!(c.result, Ok(Reply::InFrame { .. }));
                        self.finish(c, keep.then_some(slot));
                        freed = true;
                    }
                }
                _ => {
                    let status = self.ring.handle_completion(wc);
                    freed = true;
                    if !wc.is_ok() {
                        self.fail(Status::unavailable(format!("UD send failed: {status}")));
                    }
                }
            }
        }
        drop(batch);
        freed
    }

    fn on_kick(&mut self) {}

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.engine.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) -> bool {
        let (engine, ring, dest) = (&mut self.engine, &mut self.ring, &self.dest);
        engine.handle_timeout(now, |slot, t| {
            // A refused post (a full send queue) is a lost datagram: the next
            // timeout retries, and the deadline or retry budget bounds it.
            if let Err(e) = ring.post(slot, t.len, t.imm, dest) {
                tracing::debug!(error = %e, "UD retransmission not posted");
            }
        });
        self.drain_completions()
    }

    fn fail(&mut self, status: Status) {
        self.engine.handle_peer_lost(status);
        self.drain_completions();
    }
}
