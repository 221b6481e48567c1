//! [`Reader`]'s order: reads that wait for the WR budget are posted, and finish, in
//! the order they were started, so that none waits behind later ones.

use std::task::{Context, Waker};

use super::tests::{next, reader_and_lender};
use super::{Reader, RegionPool};
use crate::AccessFlags;

#[test]
fn reads_beyond_the_wr_budget_finish_in_the_order_they_started() {
    let (reader_side, lender, qr, _ql) = reader_and_lender(AccessFlags::REMOTE_READ);

    const N: u32 = 6;
    const LEN: usize = 4096;
    let lent = lender
        .pd
        .alloc_mr(N as usize * LEN, AccessFlags::REMOTE_READ)
        .unwrap();
    for k in 0..N as usize {
        lent.write(k * LEN, &[k as u8; LEN]);
    }
    // One Read in flight at a time: every other read waits for the budget.
    let pool = RegionPool::new(&reader_side.pd, 1 << 20);
    let mut reader = Reader::new(qr.clone(), pool, 1 << 20, 1);
    for k in 0..N {
        let addr = lent.addr() + u64::from(k) * LEN as u64;
        reader.start(k, addr, lent.rkey(), LEN as u32, &[]);
    }
    let mut cx = Context::from_waker(Waker::noop());
    reader.pump(&mut cx).unwrap();
    let mut finished = Vec::new();
    while finished.len() < N as usize {
        let wc = next(&reader_side.cq, &lender.cq);
        assert!(wc.is_ok(), "{wc:?}");
        reader.handle_completion(&wc);
        reader.pump(&mut cx).unwrap();
        while let Some((tag, bytes)) = reader.poll_done() {
            assert_eq!(&bytes.unwrap()[..], &[tag as u8; LEN][..]);
            finished.push(tag);
        }
    }
    assert_eq!(finished, (0..N).collect::<Vec<_>>());
}

#[test]
fn a_read_lands_at_its_sources_offset_within_64_bytes_after_its_prefix() {
    let (reader_side, lender, qr, _ql) = reader_and_lender(AccessFlags::REMOTE_READ);
    let lent = lender
        .pd
        .alloc_mr(1 << 16, AccessFlags::REMOTE_READ)
        .unwrap();
    let data: Vec<u8> = (0..40_000u32).map(|i| (i * 13) as u8).collect();
    let pool = RegionPool::new(&reader_side.pd, 1 << 20);
    let mut reader = Reader::new(qr.clone(), pool, 1 << 20, 4);
    let mut cx = Context::from_waker(Waker::noop());
    for (tag, (src_off, prefix)) in [(16usize, 5usize), (0, 41), (37, 3), (63, 0)]
        .into_iter()
        .enumerate()
    {
        lent.write(src_off, &data);
        let src = lent.addr() + src_off as u64;
        let head = vec![tag as u8; prefix];
        reader.start(tag as u32, src, lent.rkey(), data.len() as u32, &head);
        reader.pump(&mut cx).unwrap();
        let got = loop {
            let wc = next(&reader_side.cq, &lender.cq);
            reader.handle_completion(&wc);
            if let Some((t, got)) = reader.poll_done() {
                assert_eq!(t, tag as u32);
                break got.unwrap();
            }
        };
        assert_eq!(&got[..prefix], &head[..], "case {tag}: prefix first");
        assert!(got[prefix..] == data[..], "case {tag}: body after it");
        let dst = got.as_ptr() as u64 + prefix as u64;
        assert_eq!(dst % 64, src % 64, "case {tag}: destination offset");
    }
}
