//! `ProtectionDomain::register_bytes`: a peer reads an application's `Bytes` where
//! they lie, cannot write them, and cannot reach them once the registration drops.

use std::task::{Context, Waker};

use bytes::Bytes;

use super::tests::{next, reader_and_lender, Side};
use super::{Reader, RegionPool};
use crate::{AccessFlags, SendOp, SendWr, WcStatus};

#[test]
fn lent_bytes_are_read_where_they_lie_never_written_and_gone_after_drop() {
    let (reader_side, lender, qr, _ql) =
        reader_and_lender(AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE);

    // An odd slice of a heap allocation: no page alignment is needed.
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let bytes = Bytes::from(data).slice(3..70_003);
    let lent = lender.pd.register_bytes(bytes.clone()).unwrap();
    assert_eq!(
        lent.addr(),
        bytes.as_ptr() as u64,
        "registered where they lie"
    );
    assert_eq!(lent.len(), bytes.len());

    let pool = RegionPool::new(&reader_side.pd, 1 << 20);
    let mut reader = Reader::new(qr.clone(), pool, 1 << 20, 4);
    let mut cx = Context::from_waker(Waker::noop());
    reader.start(1, lent.addr(), lent.rkey(), lent.len() as u32, &[]);
    reader.pump(&mut cx).unwrap();
    let got = read_done(&mut reader, &reader_side, &lender);
    assert_eq!(&got.expect("the Read succeeds")[..], &bytes[..]);

    // A Write naming the same key is refused by the lender's device.
    let src = reader_side
        .pd
        .alloc_mr(64, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let sge = [src.sge(0, 64)];
    let write = SendWr::new(
        9,
        SendOp::RdmaWrite {
            remote_addr: lent.addr(),
            rkey: lent.rkey(),
        },
        &sge,
    );
    // SAFETY: `src` outlives the Write's completion, reaped right below.
    unsafe { qr.post_send(&[write]).unwrap() };
    let wc = next(&reader_side.cq, &lender.cq);
    assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
    assert_eq!(
        &bytes[..64],
        &(3..67u32).map(|i| (i * 7) as u8).collect::<Vec<_>>()[..]
    );
}

#[test]
fn a_dropped_registration_no_longer_reaches_the_bytes() {
    let (reader_side, lender, qr, _ql) = reader_and_lender(AccessFlags::REMOTE_READ);

    let bytes = Bytes::from(vec![5u8; 32 * 1024]);
    let lent = lender.pd.register_bytes(bytes.clone()).unwrap();
    let (addr, rkey) = (lent.addr(), lent.rkey());
    drop(lent);

    let pool = RegionPool::new(&reader_side.pd, 1 << 20);
    let mut reader = Reader::new(qr.clone(), pool, 1 << 20, 4);
    let mut cx = Context::from_waker(Waker::noop());
    reader.start(1, addr, rkey, bytes.len() as u32, &[]);
    reader.pump(&mut cx).unwrap();
    let got = read_done(&mut reader, &reader_side, &lender);
    assert!(
        got.is_err(),
        "a Read after the registration dropped succeeded"
    );
}

/// Reaps completions until the reader's one read is done.
fn read_done(reader: &mut Reader, me: &Side, peer: &Side) -> Result<Bytes, super::ReadError> {
    loop {
        let wc = next(&me.cq, &peer.cq);
        reader.handle_completion(&wc);
        if let Some((tag, got)) = reader.poll_done() {
            assert_eq!(tag, 1);
            return got;
        }
    }
}
