//! InfiniBand addressing on the `ib` profile: LIDs, and RC and UD routed by LID with
//! no GRH (issue 18 item 7). What real IB adds (a subnet manager, path records, SLs,
//! switches) is not modelled: see docs/fabrics.md.

use super::*;
use crate::{Fabric, Gid, GlobalRoute, QpEndpoint, SendOp, SoftProfile, UdDest, WcStatus, GRH_LEN};

fn ib_side(qp_type: QpType) -> Side {
    let dev = Device::open_soft_with(SoftConfig::default(), SoftProfile::Ib).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(qp_type, &cq, &cq)).unwrap();
    let mr = pd.alloc_mr(4096, ALL).unwrap();
    Side {
        dev,
        pd,
        cq,
        qp,
        mr,
    }
}

fn lid(s: &Side) -> u16 {
    s.dev.port_attr(1).unwrap().lid
}

#[test]
fn ib_ports_have_distinct_lids_and_endpoints_route_by_them() {
    let (a, b) = (ib_side(QpType::Rc), ib_side(QpType::Rc));
    assert_eq!(a.dev.caps().fabric, Fabric::InfiniBand);
    assert!(lid(&a) != 0 && lid(&b) != 0 && lid(&a) != lid(&b));
    let ep = b.qp.endpoint(0).unwrap();
    assert_eq!(ep.lid, lid(&b));
    let av = AhAttr::from_endpoint(&ep, 0);
    assert_eq!((av.dlid, av.grh), (lid(&b), None), "LID-routed: no GRH");
    // Without a LID (RoCE, soft `full`) the GID is the route, in a GRH.
    let roce = AhAttr::from_endpoint(&QpEndpoint { lid: 0, ..ep }, 0);
    assert_eq!(roce.grh.map(|g| g.dgid), Some(ep.gid));
}

#[test]
fn rc_connects_by_lid_without_a_grh() {
    let (a, b) = (ib_side(QpType::Rc), ib_side(QpType::Rc));
    let (ea, eb) = (a.qp.endpoint(1).unwrap(), b.qp.endpoint(2).unwrap());
    // A GID that names no soft device: only the LID can route this.
    let eb = QpEndpoint {
        gid: Gid([0xfe; 16]),
        ..eb
    };
    b.qp.accept_rc(&ea, 2, ALL).unwrap();
    a.qp.connect_rc(&eb, 1, ALL).unwrap();
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
    post_recv(&b, 7, 0, 64);
    a.mr.write(0, b"lid-routed");
    post(&a, SendWr::new(8, SendOp::Send, &[a.mr.sge(0, 10)]));
    assert!(wait(&a.cq, &[&b.cq]).is_ok());
    let r = wait(&b.cq, &[&a.cq]);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 10));
    assert_eq!(b.mr.to_vec(0, 10), b"lid-routed");
    // RDMA Write by LID too: the route is the connection's, not per operation.
    let remote = b.mr.remote();
    a.mr.write(100, b"written");
    post(
        &a,
        SendWr::new(
            9,
            SendOp::RdmaWrite {
                remote_addr: remote.addr + 200,
                rkey: remote.rkey,
            },
            &[a.mr.sge(100, 7)],
        ),
    );
    assert!(wait(&a.cq, &[&b.cq]).is_ok());
    assert_eq!(b.mr.to_vec(200, 7), b"written");
}

#[test]
fn ud_reaches_a_lid_through_an_address_handle_without_global_route() {
    let (a, b) = (ib_side(QpType::Ud), ib_side(QpType::Ud));
    a.qp.activate_ud(0x1111, 0).unwrap();
    b.qp.activate_ud(0x1111, 0).unwrap();
    let av = AhAttr {
        dlid: lid(&b),
        port_num: 1,
        ..AhAttr::default()
    };
    let ah = a.pd.create_ah(&av).unwrap();
    assert!(ah.attr().grh.is_none());
    post_recv(&b, 1, 0, 1024);
    a.mr.write(0, b"datagram");
    let dest = UdDest {
        ah: &ah,
        remote_qpn: b.qp.qp_num(),
        remote_qkey: 0x1111,
    };
    post(
        &a,
        SendWr::new(2, SendOp::SendWithImm { imm: 5 }, &[a.mr.sge(0, 8)]).ud(dest),
    );
    assert!(wait(&a.cq, &[&b.cq]).is_ok());
    let r = wait(&b.cq, &[&a.cq]);
    assert_eq!(
        (r.status, r.src_qp, r.imm_data),
        (WcStatus::Success, a.qp.qp_num(), Some(5))
    );
    assert_eq!(b.mr.to_vec(GRH_LEN, 8), b"datagram");
}

#[test]
fn unknown_and_released_lids_are_refused_by_name() {
    let a = ib_side(QpType::Ud);
    let gone = {
        let b = ib_side(QpType::Ud);
        lid(&b)
    };
    let av = AhAttr {
        dlid: gone,
        port_num: 1,
        ..AhAttr::default()
    };
    let e = a.pd.create_ah(&av).unwrap_err().to_string();
    assert!(
        e.contains(&format!("{gone:#x}")) && e.contains("no port"),
        "{e}"
    );
    // Neither a LID nor a GRH: nowhere to go.
    let e = a.pd.create_ah(&AhAttr::default()).unwrap_err().to_string();
    assert!(e.contains("GRH") && e.contains("LID"), "{e}");
    // A GRH still routes by GID on an IB port (IB across subnets).
    let c = ib_side(QpType::Ud);
    let grh = AhAttr {
        grh: Some(GlobalRoute {
            dgid: c.dev.gid(1, 0).unwrap(),
            ..GlobalRoute::default()
        }),
        ..AhAttr::default()
    };
    assert!(a.pd.create_ah(&grh).is_ok());
    let bogus = AhAttr {
        grh: Some(GlobalRoute {
            dgid: Gid([0xfe; 16]),
            ..GlobalRoute::default()
        }),
        ..AhAttr::default()
    };
    assert!(a.pd.create_ah(&bogus).is_err());
}
