//! Arbitrary bytes into rpc-core's frame decoders (the immediate, `REQ`/`RESP` heads,
//! fragment heads, metadata, the call codec's readers): they must never panic, the
//! ranges an accepted head names must lie inside the frame, and whatever they accept
//! must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpc_core::fuzzing::codec::{read_request, read_response, Outcome};
use rpc_core::fuzzing::wire::{
    imm, parse_imm, read_frag, write_frag_head, RequestHead, ResponseHead, FRAG_HEAD_LEN,
    REQUEST_HEAD_LEN, RESPONSE_HEAD_LEN,
};
use rpc_core::metadata::KeyRef;
use rpc_core::{Code, MetadataMap};

/// Decodes metadata under a limit; an accepted map re-encodes to the same bytes, less
/// gRPC's reserved names, which a map keeps but never sends.
fn metadata(src: &[u8], limit: usize) {
    match MetadataMap::decode(src, limit) {
        Ok(map) => {
            assert!(src.len() <= limit);
            let mut out = Vec::new();
            map.encode(&mut out);
            assert_eq!(map.encoded_len(), out.len());
            let mut sent = map.clone();
            for name in [
                "te",
                "content-type",
                "grpc-message",
                "grpc-message-type",
                "grpc-status",
            ] {
                sent.remove(name);
            }
            if sent.len() != map.len() {
                assert_eq!(MetadataMap::decode(&out, limit).ok(), Some(sent));
            } else if map.is_empty() {
                // An empty map encodes as nothing; a zero entry count is accepted too.
                assert!(src.is_empty() || src == [0, 0], "{src:?}");
            } else {
                assert_eq!(out, src, "metadata re-encodes to the same bytes");
            }
            for k in map.keys() {
                // Lookups of any decoded key work (and never panic).
                match k {
                    KeyRef::Ascii(k) => assert!(map.get(k).is_some()),
                    KeyRef::Binary(k) => assert!(map.get_bin(k).is_some()),
                }
            }
        }
        Err(s) => assert!(
            matches!(s.code(), Code::Internal | Code::ResourceExhausted),
            "{s:?}"
        ),
    }
}

fuzz_target!(|data: &[u8]| {
    // The first four bytes are the immediate, the rest the frame (slot contents).
    let Some((head, frame)) = data.split_first_chunk::<4>() else {
        return;
    };
    let raw = u32::from_be_bytes(*head);
    if let Some((kind, call_id)) = parse_imm(raw) {
        assert_eq!(imm(kind, call_id), raw, "immediate re-encodes");
    }

    if let Ok(h) = RequestHead::read(frame) {
        let mut out = [0u8; REQUEST_HEAD_LEN];
        h.write(&mut out);
        assert_eq!(&out[..], &frame[..REQUEST_HEAD_LEN]);
        assert!(h.body_start() <= frame.len());
        assert!((frame.len() - h.body_start()) as u64 <= u64::from(h.body_len));
        let _path = &frame[h.path()];
        let _ = h.timeout();
        metadata(&frame[h.meta()], usize::from(u16::MAX));
        metadata(&frame[h.meta()], frame.len() % 64);
    }

    if let Ok(h) = ResponseHead::read(frame) {
        let mut out = [0u8; RESPONSE_HEAD_LEN];
        h.write(&mut out);
        // Byte 5 (flags) is accepted only as 0, so all of the head re-encodes.
        assert_eq!(&out[..], &frame[..RESPONSE_HEAD_LEN]);
        assert!(h.body_start() <= frame.len());
        assert!((frame.len() - h.body_start()) as u64 <= u64::from(h.body_len));
        let _ = h.code();
        let _msg = String::from_utf8_lossy(&frame[h.msg()]);
        metadata(&frame[h.meta()], usize::from(u16::MAX));
    }

    // The codec's readers: ranges inside the frame, a status keeps the head's code.
    if let Ok(r) = read_request(frame) {
        assert!(r.path.end <= r.body.start && r.body.end == frame.len());
        assert!(r.body.len() <= r.body_len);
    }
    if let Ok(r) = read_response(frame) {
        assert!(r.body.start <= r.body.end && r.body.end == frame.len());
        assert!(r.body.len() <= r.body_len);
        let code = ResponseHead::read(frame)
            .expect("read_response accepted it")
            .code();
        match r.outcome {
            Outcome::Ok(_) => assert_eq!(code, Code::Ok),
            Outcome::Status(s) => assert_eq!(s.code(), code),
        }
    }

    if let Ok((offset, chunk)) = read_frag(frame) {
        assert_eq!(chunk.len() + FRAG_HEAD_LEN, frame.len());
        let mut out = [0u8; FRAG_HEAD_LEN];
        write_frag_head(&mut out, offset);
        assert_eq!(&out[..], &frame[..FRAG_HEAD_LEN]);
    }

    // The whole input as metadata, too.
    metadata(data, usize::from(u16::MAX));
});
