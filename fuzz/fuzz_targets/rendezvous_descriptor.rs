//! Arbitrary bytes into the decoders of bodies by reference (`engine::wire`, "Large
//! messages by reference"): the descriptor, `REQ`/`RESP` heads flagged `BY_REF`, and
//! stream `MSG`s flagged `RENDEZVOUS` with their `RDONE`s.
//! They must never panic; an accepted descriptor re-encodes to the same bytes, has the
//! announced length (never 0) and does not wrap the address space; a head accepted
//! with `BY_REF` has exactly a descriptor of its body after its metadata, and the
//! codec's readers hand out that same descriptor. A `MSG` accepted by reference is
//! exactly its head and a descriptor of its length, and re-encodes to the same bytes.
//! An accepted gather list has at most `MAX_GATHER_PARTS` parts, none empty, at least
//! one reference, none wrapping, summing to the announced length, and re-encodes to
//! the same bytes; a `REQ` or `RESP` accepted with `GATHER` hands out that list.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpc_core::fuzzing::codec::{read_request, read_response};
use rpc_core::fuzzing::gather::{gather_len, write_gather, Gather, Piece, MAX_GATHER_PARTS};
use rpc_core::fuzzing::wire::{
    msg_by_ref, read_msg, read_rdone, request_is_by_ref, request_is_gather, response_is_by_ref,
    response_is_gather, write_msg_by_ref, write_rdone, Descriptor, MsgFrame, RequestHead,
    ResponseHead, DESCRIPTOR_LEN, MSG_HEAD_LEN,
};

fuzz_target!(|data: &[u8]| {
    // The first four bytes are the length the head announces, the rest the frame.
    let Some((len, frame)) = data.split_first_chunk::<4>() else {
        return;
    };
    let body_len = u32::from_be_bytes(*len);

    if let Ok(d) = Descriptor::read(frame, body_len) {
        assert_eq!(frame.len(), DESCRIPTOR_LEN);
        assert_eq!(d.len, body_len);
        assert_ne!(d.len, 0);
        assert!(d.addr.checked_add(u64::from(d.len)).is_some());
        let mut out = [0u8; DESCRIPTOR_LEN];
        d.write(&mut out);
        assert_eq!(&out[..], frame, "a descriptor re-encodes to the same bytes");
    }

    if let Ok(g) = Gather::read(frame, body_len) {
        let pieces: Vec<Piece<'_>> = g.pieces().collect();
        assert!((1..=MAX_GATHER_PARTS).contains(&pieces.len()));
        assert!(pieces.iter().all(|p| !p.is_empty()));
        assert!(pieces.iter().any(|p| matches!(p, Piece::Ref(_))));
        for p in &pieces {
            if let Piece::Ref(d) = p {
                assert!(d.addr.checked_add(u64::from(d.len)).is_some());
            }
        }
        let sum: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        assert_eq!(sum, u64::from(body_len));
        let mut out = vec![0u8; gather_len(&pieces)];
        write_gather(&mut out, &pieces);
        assert_eq!(
            &out[..],
            frame,
            "a gather list re-encodes to the same bytes"
        );
    }

    if let Ok(h) = RequestHead::read(frame) {
        let rest = &frame[h.body_start()..];
        let by_ref = by_ref_of(
            rest,
            h.body_len,
            request_is_gather(frame),
            request_is_by_ref(frame),
        );
        if let (Some((d, g)), Ok(r)) = (by_ref, read_request(frame)) {
            assert_eq!((r.by_ref, r.gather), (Some(d), g));
        }
    }
    if let Ok(h) = ResponseHead::read(frame) {
        let rest = &frame[h.body_start()..];
        let by_ref = by_ref_of(
            rest,
            h.body_len,
            response_is_gather(frame),
            response_is_by_ref(frame),
        );
        if let (Some((d, g)), Ok(r)) = (by_ref, read_response(frame)) {
            assert_eq!((r.by_ref, r.gather), (Some(d), g));
        }
    }

    if let Ok(MsgFrame::ByRef { total, desc }) = read_msg(frame) {
        assert_eq!(frame.len(), MSG_HEAD_LEN + DESCRIPTOR_LEN);
        assert_eq!(desc.len, total);
        assert_eq!(msg_by_ref(frame), Some(desc));
        let mut out = [0u8; MSG_HEAD_LEN + DESCRIPTOR_LEN];
        write_msg_by_ref(&mut out, &desc);
        assert_eq!(
            &out[..],
            frame,
            "a MSG by reference re-encodes to the same bytes"
        );
    }
    if let Ok(addr) = read_rdone(frame) {
        let mut out = [0u8; 8];
        write_rdone(&mut out, addr);
        assert_eq!(&out[..], frame);
    }
});

/// What a head its `read` accepted must carry after its metadata (`rest`): with
/// `GATHER` a list of its body (summarised by its first reference), else with
/// `BY_REF` a descriptor of it; `None` for an inline body.
fn by_ref_of(
    rest: &[u8],
    body_len: u32,
    gather: bool,
    by_ref: bool,
) -> Option<(Descriptor, Option<Gather>)> {
    if gather {
        let g = Gather::read(rest, body_len)
            .expect("an accepted GATHER head carries a list of its body");
        return Some((g.summary(), Some(g)));
    }
    by_ref.then(|| {
        let d = Descriptor::read(rest, body_len)
            .expect("an accepted BY_REF head carries a descriptor of its body");
        (d, None)
    })
}
