//! Errors: protection, lengths, flushes, dead peers, CQ overrun, malformed input.

use std::time::{Duration, Instant};

use super::*;
use crate::{
    AhAttr, AsyncEvent, Device, Error, Mtu, QpAttr, QpInitAttr, QpState, QpType, RecvWr, SendOp,
    SendWr, SoftConfig, WcStatus, WorkCompletion,
};

#[test]
fn bad_rkey_is_remote_access_error_and_moves_both_to_err() {
    let (a, b) = rc_pair();
    let rb = b.mr.remote();
    post(
        &a,
        SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote_addr: rb.addr,
                rkey: rb.rkey ^ 0x100,
            },
            &[a.mr.sge(0, 8)],
        ),
    );
    post(&a, SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 8)]));
    let w = wait(&a.cq, &[&b.cq]);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemAccessErr));
    assert_eq!(wait(&a.cq, &[&b.cq]).status, WcStatus::WrFlushErr);
    assert_eq!(a.qp.state(), QpState::Err);
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.qp.state() != QpState::Err {
        let _ = b.cq.poll(&mut []);
        assert!(Instant::now() < deadline);
    }
}

#[test]
fn bad_lkey_is_local_protection_error() {
    let (a, b) = rc_pair();
    post_recv(&b, 1, 0, 64);
    let sge = [crate::Sge {
        addr: a.mr.addr(),
        length: 8,
        lkey: a.mr.lkey() ^ 0x100,
    }];
    post(&a, SendWr::new(1, SendOp::Send, &sge));
    let w = wait(&a.cq, &[&b.cq]);
    assert_eq!(w.status, WcStatus::LocProtErr);
    assert_eq!(a.qp.state(), QpState::Err);
}

#[test]
fn receive_too_small_fails_both_sides() {
    let (a, b) = rc_pair();
    post_recv(&b, 1, 0, 4);
    post(&a, SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 16)]));
    let r = wait(&b.cq, &[&a.cq]);
    assert_eq!((r.wr_id, r.status), (1, WcStatus::LocLenErr));
    let s = wait(&a.cq, &[&b.cq]);
    assert_eq!((s.wr_id, s.status), (2, WcStatus::RemInvReqErr));
}

#[test]
fn modify_to_err_flushes_and_later_posts_flush() {
    let (a, _b) = rc_pair();
    post_recv(&a, 1, 0, 8);
    post_recv(&a, 2, 8, 8);
    a.qp.modify(QpState::Err, &QpAttr::default()).unwrap();
    assert_eq!((wait(&a.cq, &[]).wr_id, wait(&a.cq, &[]).wr_id), (1, 2));
    post(&a, SendWr::new(3, SendOp::Send, &[a.mr.sge(0, 8)]));
    let w = wait(&a.cq, &[]);
    assert_eq!((w.wr_id, w.status), (3, WcStatus::WrFlushErr));
}

#[test]
fn dead_peer_moves_qp_to_err_with_qp_fatal() {
    let (a, b) = rc_pair();
    post(&a, SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)]));
    drop(b);
    let w = wait(&a.cq, &[]);
    assert!(matches!(w.status, WcStatus::RetryExcErr), "{w:?}");
    assert_eq!(a.qp.state(), QpState::Err);
    assert_eq!(
        a.dev.try_async_event(),
        Some(AsyncEvent::QpFatal(a.qp.qp_num()))
    );
}

#[test]
fn sends_before_refused_and_cq_overrun_is_an_error() {
    let s = side(QpType::Rc);
    // SAFETY: an empty gather list names no memory.
    let err = unsafe { s.qp.post_send(&[SendWr::new(1, SendOp::Send, &[])]) }.unwrap_err();
    assert!(matches!(err, Error::Post { index: 0, .. }));

    let cq = s.dev.create_cq(1).unwrap();
    let qp =
        s.pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
    qp.modify(QpState::Init, &QpAttr::rc_init(ALL)).unwrap();
    let sge = [s.mr.sge(0, 8)];
    let wrs = [
        RecvWr {
            wr_id: 1,
            sg_list: &sge,
        },
        RecvWr {
            wr_id: 2,
            sg_list: &sge,
        },
    ];
    // SAFETY: the MR outlives the QP.
    unsafe { qp.post_recv(&wrs) }.unwrap();
    qp.modify(QpState::Err, &QpAttr::default()).unwrap();
    assert!(matches!(
        cq.poll(&mut [WorkCompletion::default(); 4]),
        Err(Error::CqOverrun)
    ));
    assert_eq!(s.dev.try_async_event(), Some(AsyncEvent::CqErr(cq.id())));
}

#[test]
fn malformed_input_moves_rc_qp_to_err_and_drops_ud_datagrams() {
    use crate::soft::wire::{self, Body};
    use crate::{Gid, GlobalRoute};
    use std::io::Write;
    use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};

    let a = side(QpType::Rc);
    // A made-up peer that sorts above `a` (larger GID), so `a` waits for it to connect.
    let fake = Gid::soft(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 65535));
    let ah = AhAttr {
        grh: Some(GlobalRoute {
            dgid: fake,
            ..GlobalRoute::default()
        }),
        port_num: 1,
        ..AhAttr::default()
    };
    a.qp.modify(QpState::Init, &QpAttr::rc_init(ALL)).unwrap();
    a.qp.modify(QpState::Rtr, &QpAttr::rc_rtr(ah, 5, 0, Mtu::Mtu4096))
        .unwrap();
    let addr = a.dev.gid(1, 0).unwrap().soft_addr().unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    let mut hello = Vec::new();
    let body = Body::Hello {
        gid: fake.0,
        src_qpn: 5,
        dst_qpn: a.qp.qp_num(),
        host: 0,
        listener: 0,
    };
    wire::encode(&mut hello, 0, 0, 0, &body, 0);
    s.write_all(&hello).unwrap();
    s.write_all(&[
        wire::VERSION,
        0xee,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ])
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.qp.state() != QpState::Err {
        let _ = a.cq.poll(&mut []);
        assert!(Instant::now() < deadline, "QP never saw the bad frame");
    }
    assert_eq!(a.dev.soft_stats().unwrap().rc_frames_malformed, 1);
    assert_eq!(
        a.dev.try_async_event(),
        Some(AsyncEvent::QpFatal(a.qp.qp_num()))
    );

    let u = side(QpType::Ud);
    u.qp.activate_ud(1, 0).unwrap();
    let to = u.dev.gid(1, 0).unwrap().soft_addr().unwrap();
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .send_to(b"not a datagram", to)
        .unwrap();
    while u.dev.soft_stats().unwrap().ud_dropped_malformed == 0 {
        let _ = u.cq.poll(&mut []);
        assert!(Instant::now() < deadline, "datagram never counted");
    }
}

#[test]
fn a_peer_in_err_fails_sends_with_retry_exc_at_once() {
    let (a, b) = rc_pair();
    b.qp.modify(QpState::Err, &QpAttr::default()).unwrap();
    let start = Instant::now();
    post(&a, SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 8)]));
    post(&a, SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 8)]));
    let w = wait(&a.cq, &[&b.cq]);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RetryExcErr));
    assert_eq!(wait(&a.cq, &[&b.cq]).status, WcStatus::WrFlushErr);
    // Well before the retry budget: the ERR peer said so.
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn unusable_device_settings_are_refused() {
    use std::net::Ipv4Addr;
    let open = |cfg: SoftConfig| Device::open_soft(cfg).err();
    let base = SoftConfig::default();
    assert!(matches!(
        open(SoftConfig {
            bind: Ipv4Addr::BROADCAST,
            ..base.clone()
        }),
        Some(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        open(SoftConfig {
            ud_mtu: 100,
            ..base.clone()
        }),
        Some(Error::InvalidArgument(_))
    ));
    // A fixed port in use by another device is an error, not a shared NIC.
    let d = Device::open_soft(base.clone()).unwrap();
    let port = d.gid(1, 0).unwrap().soft_addr().unwrap().port();
    assert!(open(SoftConfig { port, ..base }).is_some());
}
