//! A device bound to the unspecified address serves every address of the host: its
//! QPs name themselves by the address a peer reaches them at, whichever side of the
//! pair opens the TCP connection.

use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use super::*;
use crate::{SendOp, WcOpcode, WcStatus};

fn side_on(bind: Ipv4Addr, port: u16) -> Option<Side> {
    let dev = Device::open_soft(SoftConfig {
        bind,
        port,
        ..SoftConfig::default()
    })
    .ok()?;
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let mr = pd.alloc_mr(4096, ALL).unwrap();
    Some(Side {
        dev,
        pd,
        cq,
        qp,
        mr,
    })
}

/// A loopback device on the first free port from `port` on in direction `step`.
fn loopback_side_from(port: u16, step: i32) -> Side {
    (1..200)
        .filter_map(|i| u16::try_from(i32::from(port) + step * i).ok())
        .find_map(|p| side_on(Ipv4Addr::LOCALHOST, p))
        .expect("a free loopback port near the wildcard device's")
}

fn connect_to(s: &Side, remote: &crate::QpEndpoint, local_psn: u32) {
    s.qp.connect_rc(remote, local_psn, ALL).unwrap();
}

#[test]
fn a_wildcard_device_names_its_qps_by_the_address_they_are_reached_at() {
    let w = side_on(Ipv4Addr::UNSPECIFIED, 0).unwrap();
    let port = w.dev.gid(1, 0).unwrap().soft_addr().unwrap().port();
    let via =
        w.qp.endpoint_via(5, IpAddr::V4(Ipv4Addr::LOCALHOST))
            .unwrap();
    assert_eq!(
        via.gid.soft_addr(),
        Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
    );
    // A device bound to one address goes by it, whatever the connection's address.
    let bound = side(QpType::Rc);
    let own = bound.qp.endpoint(5).unwrap();
    let other = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    assert_eq!(bound.qp.endpoint_via(5, other).unwrap(), own);
}

#[test]
fn rc_works_between_a_wildcard_device_and_a_bound_one_in_either_role() {
    // The side with the larger (GID, QPN) connects and GIDs start with the port: a
    // peer on a lower port and one on a higher port put the wildcard device in both
    // roles.
    for step in [-1, 1] {
        let w = side_on(Ipv4Addr::UNSPECIFIED, 0).unwrap();
        let w_port = w.dev.gid(1, 0).unwrap().soft_addr().unwrap().port();
        let p = loopback_side_from(w_port, step);
        let w_ep =
            w.qp.endpoint_via(0, IpAddr::V4(Ipv4Addr::LOCALHOST))
                .unwrap();
        connect_to(&w, &p.qp.endpoint(0).unwrap(), 0);
        connect_to(&p, &w_ep, 0);
        for (from, to) in [(&w, &p), (&p, &w)] {
            post_recv(to, 7, 0, 64);
            from.mr.write(0, b"across");
            post(from, SendWr::new(1, SendOp::Send, &[from.mr.sge(0, 6)]));
            let r = wait(&to.cq, &[&from.cq]);
            assert_eq!(
                (r.status, r.opcode, r.byte_len),
                (WcStatus::Success, WcOpcode::Recv, 6),
                "step {step}"
            );
            assert_eq!(to.mr.to_vec(0, 6), b"across");
            let s = wait(&from.cq, &[&to.cq]);
            assert_eq!(s.status, WcStatus::Success, "step {step}");
        }
    }
}
