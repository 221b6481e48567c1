//! What dropped QPs leave in a soft device's tables goes with `release_free_heap`,
//! also when nobody polls their CQ any more (a server whose clients all left).

use super::*;
use crate::cq::CqImp;
use crate::device::DeviceImp;

fn soft_cq(cq: &CompletionQueue) -> &super::super::Cq {
    #[allow(unreachable_patterns)]
    match &cq.imp {
        CqImp::Soft(c) => c,
        _ => panic!("not a soft CQ"),
    }
}

fn soft_device(dev: &Device) -> &super::super::Device {
    #[allow(unreachable_patterns)]
    match &dev.imp {
        DeviceImp::Soft(d) => d,
        _ => panic!("not a soft device"),
    }
}

/// Entries and room of the device's QP table.
fn device_qps(dev: &Device) -> (usize, usize) {
    let qps = soft_device(dev)
        .qps
        .read()
        .unwrap_or_else(|e| e.into_inner());
    (qps.len(), qps.capacity())
}

#[test]
fn a_thousand_dropped_qps_leave_no_entries_and_no_room_behind() {
    let dev = Device::open_soft(SoftConfig::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let keep = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let qps: Vec<_> = (0..1000)
        .map(|_| {
            pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
                .unwrap()
        })
        .collect();
    assert_eq!(soft_cq(&cq).members().0, 1001);
    // Nobody polls the CQ, so its own sweep never runs: only the release (this
    // one, or another test's) forgets the dead.
    drop(qps);

    crate::release_free_heap();
    let (members, room) = soft_cq(&cq).members();
    assert_eq!(members, 1, "the live QP alone is left");
    assert!(room <= 64, "room for {room} QPs left in the CQ");
    let (qps, room) = device_qps(&dev);
    assert_eq!(qps, 1);
    assert!(room <= 64, "room for {room} QPs left in the device");

    // The QP that stayed is still its CQ's and its device's, and new ones join.
    let qpn = keep.qp_num();
    assert!(soft_device(&dev).lookup_qp(qpn).is_some());
    let again = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    assert_eq!(soft_cq(&cq).members().0, 2);
    assert!(soft_device(&dev).lookup_qp(again.qp_num()).is_some());
}
