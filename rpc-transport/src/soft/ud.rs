//! Unreliable datagram QPs: every UD QP of a device shares its UDP socket.
//!
//! A send is complete once the datagram is handed to the socket (or dropped by
//! fault injection), as on hardware. Incoming datagrams are routed by destination QPN;
//! one without a matching Q_Key or a posted receive is dropped and counted.

use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::addr::Gid;
use crate::ah::AhImp;
use crate::qp_state::{QpState, QpType};
use crate::wc::{WcOpcode, WcStatus, WorkCompletion};
use crate::wr::{SendFlags, SendOp, SendWr};
use crate::GRH_LEN;

use super::device::{bump, Device};
use super::faults::Faults;
use super::mem::{self, ScatterError};
use super::qp::{Inner, Qp};
use super::wire::{self, Datagram, UD_HDR_LEN};
use super::UdFaults;

/// A datagram held back by reordering is released after this long if no other
/// datagram overtakes it.
const HOLD_NS: u64 = 1_000_000;
/// Datagrams read per drain, so one poll does not starve the others.
const DRAIN_BATCH: usize = 64;

struct FaultState {
    f: Faults,
    held: Vec<u8>,
    held_to: Option<SocketAddrV4>,
    held_at: u64,
}

/// The device-wide UD state.
pub(crate) struct UdShared {
    faults_on: AtomicBool,
    faults: Mutex<FaultState>,
    // One receive buffer per device; pollers that find it busy skip the drain, since
    // whoever holds it is already reading the socket.
    rx: Mutex<Box<[u8]>>,
}

impl UdShared {
    pub(crate) fn new(cfg: UdFaults) -> UdShared {
        UdShared {
            faults_on: AtomicBool::new(Faults::active(&cfg)),
            faults: Mutex::new(FaultState {
                f: Faults::new(cfg),
                held: Vec::new(),
                held_to: None,
                held_at: 0,
            }),
            rx: Mutex::new(vec![0u8; UD_HDR_LEN + 65_536].into_boxed_slice()),
        }
    }

    pub(crate) fn set_faults(&self, cfg: UdFaults) {
        let mut fs = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        fs.f = Faults::new(cfg);
        self.faults_on
            .store(Faults::active(&cfg), Ordering::Relaxed);
    }
}

impl Device {
    pub(crate) fn udp_fd(&self) -> RawFd {
        self.udp.as_raw_fd()
    }

    fn raw_send(&self, pkt: &[u8], to: SocketAddrV4) {
        // A full socket buffer loses the datagram, which UD allows.
        let _ = self.udp.send_to(pkt, to);
        bump(&self.stats.ud_sent);
    }

    /// Sends one datagram through fault injection.
    pub(crate) fn ud_transmit(&self, pkt: &[u8], to: SocketAddrV4) {
        if !self.ud.faults_on.load(Ordering::Relaxed) {
            self.raw_send(pkt, to);
            return;
        }
        let mut fs = self.ud.faults.lock().unwrap_or_else(|e| e.into_inner());
        let v = fs.f.decide();
        if v.drop {
            bump(&self.stats.ud_dropped_injected);
            return;
        }
        if v.hold && fs.held_to.is_none() {
            fs.held.clear();
            fs.held.extend_from_slice(pkt);
            fs.held_to = Some(to);
            fs.held_at = self.now_ns();
            return;
        }
        self.raw_send(pkt, to);
        if v.duplicate {
            self.raw_send(pkt, to);
            bump(&self.stats.ud_duplicated);
        }
        if let Some(h) = fs.held_to.take() {
            self.raw_send(&fs.held, h);
        }
    }

    /// Whether a reordered datagram is waiting to be released.
    pub(crate) fn ud_held(&self) -> bool {
        self.ud.faults_on.load(Ordering::Relaxed)
            && self
                .ud
                .faults
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .held_to
                .is_some()
    }

    /// Whether a CQ with UD QPs was polled within `ns`.
    pub(crate) fn ud_attended(&self, now: u64, ns: u64) -> bool {
        let cqs = self.cqs.lock().unwrap_or_else(|e| e.into_inner());
        cqs.iter()
            .filter_map(|w| w.upgrade())
            .any(|c| c.has_ud() && now.saturating_sub(c.last_poll()) < ns)
    }

    /// Sends a held-back datagram nobody overtook.
    pub(crate) fn ud_release_held(&self, now: u64) {
        if !self.ud.faults_on.load(Ordering::Relaxed) {
            return;
        }
        let mut fs = self.ud.faults.lock().unwrap_or_else(|e| e.into_inner());
        if fs.held_to.is_some() && now.saturating_sub(fs.held_at) > HOLD_NS {
            let to = fs.held_to.take().expect("checked");
            self.raw_send(&fs.held, to);
        }
    }

    /// Reads and delivers waiting datagrams.
    pub(crate) fn ud_drain(&self) {
        let Ok(mut buf) = self.ud.rx.try_lock() else {
            return;
        };
        for _ in 0..DRAIN_BATCH {
            match self.udp.recv_from(&mut buf) {
                Ok((n, SocketAddr::V4(from))) => self.ud_deliver(&buf[..n], from),
                Ok(_) => bump(&self.stats.ud_dropped_malformed),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    }

    fn ud_deliver(&self, pkt: &[u8], from: SocketAddrV4) {
        let Ok(d) = wire::decode_ud(pkt) else {
            bump(&self.stats.ud_dropped_malformed);
            return;
        };
        match self.lookup_qp(d.dst_qpn) {
            Some(qp) if qp.qp_type == QpType::Ud => qp.ud_receive(&d, from),
            _ => bump(&self.stats.ud_dropped_no_qp),
        }
    }
}

/// The 40-byte GRH area of a UD receive: an IPv6 header naming both GIDs, as verbs
/// presents it.
fn grh(sgid: Gid, dgid: Gid, payload: usize) -> [u8; GRH_LEN] {
    let mut h = [0u8; GRH_LEN];
    h[0] = 0x60; // version 6, traffic class 0, flow label 0
    h[4..6].copy_from_slice(&(payload.min(usize::from(u16::MAX)) as u16).to_be_bytes());
    h[6] = 0x1b; // next header: IB BTH
    h[7] = 64; // hop limit
    h[8..24].copy_from_slice(&sgid.0);
    h[24..40].copy_from_slice(&dgid.0);
    h
}

/// Sends one UD WR now; returns its completion status.
///
/// # Safety
/// Inline SGEs must be readable for the duration of the call.
pub(crate) unsafe fn send(qp: &Qp, g: &mut Inner, wr: &SendWr<'_>) -> WcStatus {
    let Some(ud) = wr.ud else {
        return WcStatus::LocQpOpErr;
    };
    #[allow(irrefutable_let_patterns)] // refutable with feature `rdma`
    let AhImp::Soft(ah) = &ud.ah.imp
    else {
        return WcStatus::LocQpOpErr;
    };
    let len = wr.total_len();
    if len > u64::from(qp.dev.ud_mtu) {
        return WcStatus::LocLenErr;
    }
    // A Q_Key with the high bit set means "use the QP's own".
    let qkey = if ud.remote_qkey & 0x8000_0000 != 0 {
        g.attr.qkey
    } else {
        ud.remote_qkey
    };
    let (imm, flags) = match wr.opcode {
        SendOp::SendWithImm { imm } => (imm, wire::IMM),
        _ => (0, 0),
    };
    let sol = if wr.flags.contains(SendFlags::SOLICITED) {
        wire::SOLICITED
    } else {
        0
    };
    let buf = &mut g.ud_buf;
    buf.clear();
    buf.resize(UD_HDR_LEN + len as usize, 0);
    let hdr: &mut [u8; UD_HDR_LEN] = (&mut buf[..UD_HDR_LEN]).try_into().expect("header size");
    wire::encode_ud(
        hdr,
        flags | sol,
        qp.qpn,
        ud.remote_qpn & wire::SEQ_MASK,
        qkey,
        imm,
        len as usize,
    );
    if wr.flags.contains(SendFlags::INLINE) {
        let mut at = UD_HDR_LEN;
        for s in wr.sg_list.iter().filter(|s| s.length > 0) {
            let n = s.length as usize;
            // SAFETY: the caller promises inline SGEs are readable; the destination
            // range is inside `buf`, sized to the total above.
            unsafe {
                std::ptr::copy_nonoverlapping(s.addr as *const u8, buf[at..at + n].as_mut_ptr(), n)
            };
            at += n;
        }
    } else if mem::gather(
        &qp.dev.keys,
        qp.pd.id,
        wr.sg_list,
        0,
        &mut buf[UD_HDR_LEN..],
    )
    .is_err()
    {
        return WcStatus::LocProtErr;
    }
    qp.dev.ud_transmit(buf, ah.addr);
    WcStatus::Success
}

impl Qp {
    /// Delivers a datagram addressed to this UD QP.
    pub(crate) fn ud_receive(&self, d: &Datagram<'_>, from: SocketAddrV4) {
        let stats = &self.dev.stats;
        let mut g = self.lock();
        if !matches!(
            g.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            bump(&stats.ud_dropped_no_recv);
            return;
        }
        if d.qkey != g.attr.qkey {
            bump(&stats.ud_dropped_qkey);
            return;
        }
        let Some((wqe, pd)) = self.take_recv(&mut g.rq) else {
            bump(&stats.ud_dropped_no_recv);
            return;
        };
        let h = grh(Gid::soft(from), self.dev.gid, d.payload.len());
        let keys = &self.dev.keys;
        let r = mem::scatter(keys, pd, wqe.sges(), 0, &h)
            .and_then(|()| mem::scatter(keys, pd, wqe.sges(), GRH_LEN as u64, d.payload));
        let status = match r {
            Ok(()) => WcStatus::Success,
            Err(ScatterError::Len) => WcStatus::LocLenErr,
            Err(ScatterError::Prot(_)) => WcStatus::LocProtErr,
        };
        if status != WcStatus::Success {
            self.push_recv_error(wqe.wr_id, status);
            self.enter_err(&mut g, None, false);
            return;
        }
        bump(&stats.ud_received);
        let wc = WorkCompletion {
            wr_id: wqe.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: (GRH_LEN + d.payload.len()) as u32,
            imm_data: (d.flags & wire::IMM != 0).then_some(d.imm),
            qp_num: self.qpn,
            src_qp: d.src_qpn,
            grh: true,
            ..WorkCompletion::default()
        };
        if !self.recv_cq.push(wc, d.flags & wire::SOLICITED != 0) {
            self.enter_err(&mut g, None, false);
        }
    }
}
