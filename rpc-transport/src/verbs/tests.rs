//! Device tests of the verbs provider, through the public API.
//!
//! They need a real verbs device, so they are `#[ignore]`d: on a host without RDMA they
//! show as ignored, never as passed. `scripts/softroce-vm` runs them in the SoftRoCE VM
//! with `--include-ignored verbs::tests::` and `RDMA_RPC_TEST_DEVICE=rxe0`; there a
//! missing device is a loud failure, not a skip. What the conformance suite checks for
//! every provider is not repeated here: these cover verbs-specific paths (post lists
//! longer than the stack chain, inline sends at the device's limit, the completion
//! channel, async events, GRH on UD, RAII order).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{
    AccessFlags, AddressHandle, AhAttr, AsyncEvent, CompletionQueue, Device, Error, MemoryRegion,
    PostError, ProtectionDomain, ProviderKind, QpCap, QpInitAttr, QpState, QpType, QueuePair,
    RecvWr, SendFlags, SendOp, SendWr, SrqInitAttr, UdDest, WcOpcode, WcStatus, WorkCompletion,
    GRH_LEN,
};

/// The device named by `RDMA_RPC_TEST_DEVICE`, else the first verbs device; panics
/// when there is none.
fn device() -> Device {
    let name = std::env::var("RDMA_RPC_TEST_DEVICE").ok().or_else(|| {
        Device::list()
            .ok()?
            .into_iter()
            .find(|d| d.provider == ProviderKind::Verbs)
            .map(|d| d.name)
    });
    let name = name.expect("no verbs device: set RDMA_RPC_TEST_DEVICE (these tests need RDMA)");
    let dev = Device::open(&name).unwrap_or_else(|e| panic!("cannot open {name}: {e}"));
    assert_eq!(
        dev.provider(),
        ProviderKind::Verbs,
        "{name} is not a verbs device"
    );
    dev
}

/// Polls until `n` completions arrived (10 s limit).
fn wait(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wc = [WorkCompletion::default(); 8];
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let k = cq.poll(&mut wc).expect("poll");
        out.extend_from_slice(&wc[..k]);
        assert!(Instant::now() < deadline, "only {out:?} of {n} completions");
    }
    out
}

struct RcPair {
    a: QueuePair,
    b: QueuePair,
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    pd: ProtectionDomain,
}

fn rc_pair(dev: &Device, cap: QpCap) -> RcPair {
    let pd = dev.alloc_pd().unwrap();
    let cq_a = dev.create_cq(256).unwrap();
    let cq_b = dev.create_cq(256).unwrap();
    let mk = |cq: &CompletionQueue| {
        let mut init = QpInitAttr::new(QpType::Rc, cq, cq);
        init.cap = cap;
        pd.create_qp(&init).unwrap()
    };
    let (a, b) = (mk(&cq_a), mk(&cq_b));
    let (ea, eb) = (a.endpoint(0x11).unwrap(), b.endpoint(0x22).unwrap());
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    a.accept_rc(&eb, 0x11, access).unwrap();
    b.connect_rc(&ea, 0x22, access).unwrap();
    assert_eq!((a.state(), b.state()), (QpState::Rts, QpState::Rts));
    RcPair {
        a,
        b,
        cq_a,
        cq_b,
        pd,
    }
}

fn rw_mr(pd: &ProtectionDomain, len: usize) -> MemoryRegion {
    pd.alloc_mr(
        len,
        AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
    )
    .unwrap()
}

#[test]
#[ignore = "needs an RDMA device: run in the SoftRoCE VM (scripts/softroce-vm)"]
fn device_ports_and_preferred_gid() {
    let dev = device();
    let attr = dev.attr();
    assert!(
        attr.max_qp > 0 && attr.max_cqe > 0 && attr.max_sge > 0,
        "{attr:?}"
    );
    let port = dev.port_attr(1).unwrap();
    assert!(port.active, "{port:?}");
    let idx = dev.preferred_gid_index();
    let gid = dev.gid(1, idx).unwrap();
    if dev.caps().fabric == crate::Fabric::Iwarp {
        // iWARP: the GID is the netdev's MAC, and an RC QP's endpoint names the
        // device's rdma_cm listener instead: IPv4-mapped address and port.
        assert!(gid.0[6..].iter().all(|&b| b == 0), "{gid}");
        assert!(gid.0[..6].iter().any(|&b| b != 0), "{gid}");
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(4).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        let ep = qp.endpoint(0).unwrap();
        assert_eq!(&ep.gid.0[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert!(ep.lid != 0, "the listener's port: {ep:?}");
        assert_eq!(ep.qpn, qp.qp_num());
    } else {
        // On rxe over IPv4 the preferred GID is the IPv4-mapped one (index 1 in the VM).
        assert_eq!(
            &gid.0[..12],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff],
            "{gid}"
        );
    }
    assert!(matches!(
        Device::open("no-such-device"),
        Err(Error::NoDevice(_))
    ));
}

#[test]
#[ignore = "needs an RDMA device: run in the SoftRoCE VM (scripts/softroce-vm)"]
fn detected_caps_hold_for_the_device() {
    let dev = device();
    let caps = dev.caps();
    eprintln!("{}: {caps}", dev.name());
    // rxe and siw are what the VM has; each fabric has what it promises.
    if dev.name().starts_with("rxe") {
        assert_eq!(caps.fabric, crate::Fabric::Roce, "{caps}");
    }
    if dev.name().starts_with("siw") {
        assert_eq!(caps.fabric, crate::Fabric::Iwarp, "{caps}");
    }
    assert_eq!(caps.imm_data, caps.fabric != crate::Fabric::Iwarp, "{caps}");
    assert_eq!(caps.atomics, dev.attr().atomics);
    assert_eq!(caps.max_sge, dev.attr().max_sge);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4).unwrap();
    let mut init = QpInitAttr::new(QpType::Ud, &cq, &cq);
    init.cap.max_inline_data = 0;
    assert_eq!(pd.create_qp(&init).is_ok(), caps.ud, "{caps}");
    // The detected inline size is one an RC QP is granted.
    init.qp_type = QpType::Rc;
    init.cap.max_inline_data = caps.max_inline;
    let qp = pd
        .create_qp(&init)
        .expect("an RC QP with the detected inline size");
    assert!(qp.cap().max_inline_data >= caps.max_inline);
}

#[test]
#[ignore = "needs an RDMA device: run in the SoftRoCE VM (scripts/softroce-vm)"]
fn post_lists_longer_than_the_stack_chain_complete_in_order() {
    let dev = device();
    let p = rc_pair(&dev, QpCap::default());
    let n = 40; // > 16: the chain goes to the heap path
    let rx = rw_mr(&p.pd, n * 64);
    let tx = rw_mr(&p.pd, n * 64);
    for i in 0..n {
        tx.write(i * 64, &[i as u8; 64]);
    }
    let rsge: Vec<_> = (0..n).map(|i| [rx.sge(i * 64, 64)]).collect();
    let rwrs: Vec<_> = (0..n)
        .map(|i| RecvWr {
            wr_id: 1000 + i as u64,
            sg_list: &rsge[i],
        })
        .collect();
    // SAFETY: rx stays alive and untouched until the completions below.
    unsafe { p.b.post_recv(&rwrs) }.unwrap();
    let ssge: Vec<_> = (0..n).map(|i| [tx.sge(i * 64, 64)]).collect();
    // Without immediate data (iWARP) plain Sends: the order is what is checked.
    let imm = dev.caps().imm_data;
    let swrs: Vec<_> = (0..n)
        .map(|i| {
            let op = if imm {
                SendOp::SendWithImm {
                    imm: 0xdead_0000 + i as u32,
                }
            } else {
                SendOp::Send
            };
            SendWr::new(i as u64, op, &ssge[i])
        })
        .collect();
    // SAFETY: tx stays alive and unmodified until the completions below.
    unsafe { p.a.post_send(&swrs) }.unwrap();
    let sent = wait(&p.cq_a, n);
    let got = wait(&p.cq_b, n);
    for i in 0..n {
        assert!(
            sent[i].is_ok() && sent[i].wr_id == i as u64,
            "{:?}",
            sent[i]
        );
        let r = &got[i];
        assert_eq!(
            (r.status, r.opcode, r.byte_len),
            (WcStatus::Success, WcOpcode::Recv, 64)
        );
        assert_eq!(r.wr_id, 1000 + i as u64, "in order");
        assert_eq!(
            r.imm_data,
            imm.then_some(0xdead_0000 + i as u32),
            "immediate in host order"
        );
        assert_eq!(r.qp_num, p.b.qp_num());
        assert_eq!(rx.to_vec(i * 64, 64), vec![i as u8; 64]);
    }
}

#[test]
#[ignore = "needs an RDMA device: run in the SoftRoCE VM (scripts/softroce-vm)"]
fn inline_sends_up_to_max_inline_data_and_refuses_beyond() {
    let dev = device();
    // What the device offers (siw: 80), at most 128.
    let want = dev.caps().max_inline.min(128);
    let p = rc_pair(
        &dev,
        QpCap {
            max_inline_data: want,
            ..QpCap::default()
        },
    );
    let max = p.a.cap().max_inline_data as usize;
    assert!(max >= want as usize && max > 0, "granted {max}");
    let rx = rw_mr(&p.pd, max);
    let rsge = [rx.sge(0, max as u32)];
    // SAFETY: rx untouched until the completion.
    unsafe {
        p.b.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &rsge,
        }])
    }
    .unwrap();
    // Inline payload from ordinary (unregistered) memory: no lkey is checked.
    let payload: Vec<u8> = (0..max).map(|i| i as u8).collect();
    let sge = [crate::Sge {
        addr: payload.as_ptr() as u64,
        length: max as u32,
        lkey: 0,
    }];
    let inline = SendFlags::SIGNALED | SendFlags::INLINE;
    let ok = SendWr::new(7, SendOp::Send, &sge).flags(inline);
    // SAFETY: inline: the payload is copied before post_send returns.
    unsafe { p.a.post_send(&[ok]) }.unwrap();
    drop(payload); // reusable at once
    assert!(wait(&p.cq_a, 1)[0].is_ok());
    let r = wait(&p.cq_b, 1)[0];
    assert_eq!(r.byte_len as usize, max);
    assert_eq!(
        rx.to_vec(0, max),
        (0..max).map(|i| i as u8).collect::<Vec<_>>()
    );

    // A list whose second WR exceeds the limit: the first is posted, the second refused.
    let small = [1u8; 8];
    let big = vec![0u8; max + 1];
    let sge_small = [crate::Sge {
        addr: small.as_ptr() as u64,
        length: 8,
        lkey: 0,
    }];
    let sge_big = [crate::Sge {
        addr: big.as_ptr() as u64,
        length: big.len() as u32,
        lkey: 0,
    }];
    // SAFETY: rx untouched until the completion.
    unsafe {
        p.b.post_recv(&[RecvWr {
            wr_id: 2,
            sg_list: &rsge,
        }])
    }
    .unwrap();
    let wrs = [
        SendWr::new(8, SendOp::Send, &sge_small).flags(inline),
        SendWr::new(9, SendOp::Send, &sge_big).flags(inline),
    ];
    // SAFETY: inline WRs over live memory.
    let err = unsafe { p.a.post_send(&wrs) }.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Post {
                index: 1,
                reason: PostError::InlineTooLarge
            }
        ),
        "{err:?}"
    );
    let done = wait(&p.cq_a, 1);
    assert_eq!(done[0].wr_id, 8, "the WR before the refused one was posted");
    assert_eq!(wait(&p.cq_b, 1)[0].byte_len, 8);
}

#[test]
#[ignore = "needs an RDMA device: run in the SoftRoCE VM (scripts/softroce-vm)"]
fn rdma_write_with_imm_read_and_atomics() {
    let dev = device();
    let p = rc_pair(&dev, QpCap::default());
    let local = rw_mr(&p.pd, 4096);
    let remote = rw_mr(&p.pd, 4096);
    local.write(0, b"written by RDMA");
    // SAFETY: a receive without memory, consumed by the Write with immediate.
    unsafe {
        p.b.post_recv(&[RecvWr {
            wr_id: 5,
            sg_list: &[],
        }])
    }
    .unwrap();
    let r = remote.remote();
    let wsge = [local.sge(0, 15)];
    let write = SendWr::new(
        1,
        SendOp::RdmaWriteWithImm {
            remote_addr: r.addr + 100,
            rkey: r.rkey,
            imm: 42,
        },
        &wsge,
    );
    // SAFETY: local stays untouched until the completion.
    unsafe { p.a.post_send(&[write]) }.unwrap();
    assert!(wait(&p.cq_a, 1)[0].is_ok());
    let got = wait(&p.cq_b, 1)[0];
    assert_eq!(
        (got.opcode, got.imm_data),
        (WcOpcode::RecvRdmaWithImm, Some(42))
    );
    assert_eq!(remote.to_vec(100, 15), b"written by RDMA");

    remote.write(1024, &7u64.to_ne_bytes());
    let dst = [local.sge(2048, 8)];
    let fa = SendWr::new(
        2,
        SendOp::FetchAdd {
            remote_addr: r.addr + 1024,
            rkey: r.rkey,
            add: 5,
        },
        &dst,
    );
    let read_dst = [local.sge(3000, 15)];
    let read = SendWr::new(
        3,
        SendOp::RdmaRead {
            remote_addr: r.addr + 100,
            rkey: r.rkey,
        },
        &read_dst,
    );
    // SAFETY: local's target ranges untouched until the completions.
    unsafe { p.a.post_send(&[fa, read]) }.unwrap();
    let wc = wait(&p.cq_a, 2);
    assert_eq!(
        (wc[0].opcode, wc[1].opcode),
        (WcOpcode::FetchAdd, WcOpcode::RdmaRead),
        "{wc:?}"
    );
    assert!(wc.iter().all(|c| c.is_ok()), "{wc:?}");
    assert_eq!(local.to_vec(2048, 8), 7u64.to_ne_bytes());
    assert_eq!(remote.to_vec(1024, 8), 12u64.to_ne_bytes());
    assert_eq!(local.to_vec(3000, 15), b"written by RDMA");
}

#[test]
#[ignore = "needs an RDMA device: run in the SoftRoCE VM (scripts/softroce-vm)"]
fn completion_channel_wakes_tokio_and_events_are_acked() {
    let dev = device();
    let p = Arc::new(rc_pair(&dev, QpCap::default()));
    let rx = Arc::new(rw_mr(&p.pd, 64));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Without immediate data (iWARP) plain Sends, told apart by their payload.
    let imm = dev.caps().imm_data;
    for round in 0..3u32 {
        let rsge = [rx.sge(0, 64)];
        // SAFETY: rx untouched until the completion.
        unsafe {
            p.b.post_recv(&[RecvWr {
                wr_id: 9,
                sg_list: &rsge,
            }])
        }
        .unwrap();
        let sender = {
            let p = p.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50)); // the receiver is asleep by now
                let tx = rw_mr(&p.pd, 8);
                tx.write(0, &round.to_be_bytes());
                let sge = [tx.sge(0, 8)];
                let op = if imm {
                    SendOp::SendWithImm { imm: round }
                } else {
                    SendOp::Send
                };
                let wr = SendWr::new(1, op, &sge);
                // SAFETY: tx lives until its completion is polled below.
                unsafe { p.a.post_send(&[wr]) }.unwrap();
                assert!(wait(&p.cq_a, 1)[0].is_ok());
            })
        };
        let mut wc = [WorkCompletion::default(); 4];
        let n = rt
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(10), p.cq_b.poll_async(&mut wc)).await
            })
            .expect("no wake-up from the completion channel")
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(wc[0].imm_data, imm.then_some(round));
        assert_eq!(rx.to_vec(0, 4), round.to_be_bytes());
        sender.join().unwrap();
    }
    // An armed CQ with an unread event must still be destroyable (events acked on drop).
    p.cq_b.req_notify(false).unwrap();
    let rsge = [rx.sge(0, 64)];
    // SAFETY: rx untouched until the QPs are destroyed below.
    unsafe {
        p.b.post_recv(&[RecvWr {
            wr_id: 10,
            sg_list: &rsge,
        }])
    }
    .unwrap();
    let tx = rw_mr(&p.pd, 8);
    let sge = [tx.sge(0, 8)];
    // SAFETY: tx lives until the completion.
    unsafe { p.a.post_send(&[SendWr::new(2, SendOp::Send, &sge)]) }.unwrap();
    assert!(wait(&p.cq_a, 1)[0].is_ok());
    assert_eq!(wait(&p.cq_b, 1)[0].wr_id, 10);
    drop(p); // would hang in ibv_destroy_cq if the event were not acknowledged
}

#[test]
#[ignore = "needs an RDMA device: run in the SoftRoCE VM (scripts/softroce-vm)"]
fn ud_datagrams_carry_grh_and_source_qp() {
    let dev = device();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    if !dev.caps().ud {
        // siw: "only RC QP's supported"; the refusal is what callers act on.
        match pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq)) {
            Err(crate::Error::Verb { verb, source }) => {
                assert_eq!(verb, "ibv_create_qp");
                assert_eq!(source.raw_os_error(), Some(libc::EOPNOTSUPP));
            }
            other => panic!("a device without UD created a UD QP: {other:?}"),
        }
        return;
    }
    let mk = || {
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
            .unwrap();
        qp.activate_ud(0x1111_1111, 0).unwrap();
        qp
    };
    let (a, b) = (mk(), mk());
    let rx = rw_mr(&pd, GRH_LEN + 256);
    let rsge = [rx.sge(0, (GRH_LEN + 256) as u32)];
    // SAFETY: rx untouched until the completion.
    unsafe {
        b.post_recv(&[RecvWr {
            wr_id: 3,
            sg_list: &rsge,
        }])
    }
    .unwrap();
    let ah: AddressHandle = pd
        .create_ah(&AhAttr::from_endpoint(
            &b.endpoint(0).unwrap(),
            dev.preferred_gid_index(),
        ))
        .unwrap();
    let tx = rw_mr(&pd, 100);
    tx.write(0, &[0x5a; 100]);
    let sge = [tx.sge(0, 100)];
    let wr = SendWr::new(4, SendOp::SendWithImm { imm: 77 }, &sge).ud(UdDest {
        ah: &ah,
        remote_qpn: b.qp_num(),
        remote_qkey: 0x1111_1111,
    });
    // SAFETY: tx lives until the completion.
    unsafe { a.post_send(&[wr]) }.unwrap();
    let wc = wait(&cq, 2);
    let r = wc.iter().find(|c| c.wr_id == 3).expect("receive");
    assert!(r.is_ok() && r.grh, "{r:?}");
    assert_eq!((r.byte_len as usize, r.src_qp), (GRH_LEN + 100, a.qp_num()));
    assert_eq!(r.imm_data, Some(77));
    assert_eq!(rx.to_vec(GRH_LEN, 100), vec![0x5a; 100]);
    // An RDMA Write on UD is refused before it reaches the device.
    let bad = SendWr::new(
        5,
        SendOp::RdmaWrite {
            remote_addr: 0,
            rkey: 0,
        },
        &sge,
    )
    .ud(UdDest {
        ah: &ah,
        remote_qpn: b.qp_num(),
        remote_qkey: 0x1111_1111,
    });
    // SAFETY: refused synchronously, nothing is posted.
    let err = unsafe { a.post_send(&[bad]) }.unwrap_err();
    assert!(matches!(
        err,
        Error::Post {
            index: 0,
            reason: PostError::InvalidOpcode
        }
    ));
    // Over the port MTU: refused at post time (rxe would report success and drop it).
    let mtu = dev.port_attr(1).unwrap().active_mtu.bytes() as usize;
    let big = rw_mr(&pd, mtu + 1);
    let bsge = [big.sge(0, mtu as u32 + 1)];
    let dest = UdDest {
        ah: &ah,
        remote_qpn: b.qp_num(),
        remote_qkey: 0x1111_1111,
    };
    let wrs = [
        SendWr::new(6, SendOp::Send, &sge).ud(dest),
        SendWr::new(7, SendOp::Send, &bsge).ud(dest),
    ];
    // SAFETY: rx gets a receive for the first WR; tx and big live until the end.
    unsafe {
        b.post_recv(&[RecvWr {
            wr_id: 8,
            sg_list: &rsge,
        }])
    }
    .unwrap();
    // SAFETY: the first WR is posted, the second refused; tx lives until its completion.
    let err = unsafe { a.post_send(&wrs) }.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Post {
                index: 1,
                reason: PostError::MessageTooLarge
            }
        ),
        "{err:?}"
    );
    let wc = wait(&cq, 2);
    assert!(wc.iter().all(|c| c.is_ok()), "{wc:?}");
}

#[test]
#[ignore = "needs an RDMA device: run in the SoftRoCE VM (scripts/softroce-vm)"]
fn srq_limit_raises_async_event_on_the_device_fd() {
    let dev = device();
    let p = rc_pair(&dev, QpCap::default());
    let srq =
        p.pd.create_srq(&SrqInitAttr {
            max_wr: 64,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let cq = dev.create_cq(64).unwrap();
    let mut init = QpInitAttr::new(QpType::Rc, &p.cq_a, &cq);
    init.srq = Some(&srq);
    let srv = p.pd.create_qp(&init).unwrap();
    let cli =
        p.pd.create_qp(&QpInitAttr::new(QpType::Rc, &p.cq_a, &p.cq_a))
            .unwrap();
    let (es, ec) = (srv.endpoint(1).unwrap(), cli.endpoint(2).unwrap());
    srv.accept_rc(&ec, 1, AccessFlags::LOCAL_WRITE).unwrap();
    cli.connect_rc(&es, 2, AccessFlags::LOCAL_WRITE).unwrap();
    let rx = rw_mr(&p.pd, 8 * 64);
    let rsge: Vec<_> = (0..8).map(|i| [rx.sge(i * 64, 64)]).collect();
    let wrs: Vec<_> = (0..8)
        .map(|i| RecvWr {
            wr_id: i as u64,
            sg_list: &rsge[i],
        })
        .collect();
    // SAFETY: rx untouched until the completions (or the end of the test).
    unsafe { srq.post_recv(&wrs) }.unwrap();
    srq.arm_limit(6).unwrap();
    while dev.try_async_event().is_some() {} // nothing stale
    let tx = rw_mr(&p.pd, 8);
    let sge = [tx.sge(0, 8)];
    let sends: Vec<_> = (0..3).map(|i| SendWr::new(i, SendOp::Send, &sge)).collect();
    // SAFETY: tx lives until the completions.
    unsafe { cli.post_send(&sends) }.unwrap();
    assert_eq!(wait(&cq, 3).len(), 3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ev = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), dev.async_event()).await })
        .expect("no async event")
        .unwrap();
    assert_eq!(ev, AsyncEvent::SrqLimitReached(srq.id()));
    assert!(dev.try_async_event().is_none(), "the limit fires once");
}

#[test]
#[ignore = "needs an RDMA device: run in the SoftRoCE VM (scripts/softroce-vm)"]
fn error_state_flushes_and_bad_posts_are_refused_with_their_index() {
    let dev = device();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let rx = rw_mr(&pd, 64);
    let sge = [rx.sge(0, 64)];
    let too_many = vec![rx.sge(0, 1); qp.cap().max_recv_sge as usize + 1];
    qp.modify(
        QpState::Init,
        &crate::QpAttr::rc_init(AccessFlags::LOCAL_WRITE),
    )
    .unwrap();
    let wrs = [
        RecvWr {
            wr_id: 1,
            sg_list: &sge,
        },
        RecvWr {
            wr_id: 2,
            sg_list: &too_many,
        },
    ];
    // SAFETY: rx untouched until the flush completions below.
    let err = unsafe { qp.post_recv(&wrs) }.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Post {
                index: 1,
                reason: PostError::TooManySges
            }
        ),
        "{err:?}"
    );
    qp.modify(QpState::Err, &crate::QpAttr::default()).unwrap();
    assert_eq!(qp.state(), QpState::Err);
    let wc = wait(&cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::WrFlushErr));
}

#[test]
#[ignore = "needs an RDMA device: run in the SoftRoCE VM (scripts/softroce-vm)"]
fn children_keep_their_parents_alive() {
    let mr;
    let qp;
    {
        let dev = device();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(8).unwrap();
        mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        // dev, pd and cq handles drop here; the objects must not.
    }
    mr.write(0, b"still registered");
    assert_eq!(mr.to_vec(0, 16), b"still registered");
    assert!(mr.lkey() != 0 || mr.rkey() != 0);
    qp.modify(
        QpState::Init,
        &crate::QpAttr::rc_init(AccessFlags::LOCAL_WRITE),
    )
    .unwrap();
    assert_eq!(qp.state(), QpState::Init);
    drop(qp); // QP before CQ, PD and device: no EBUSY warnings
    drop(mr);
}
