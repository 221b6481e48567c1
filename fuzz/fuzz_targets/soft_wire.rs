//! Arbitrary bytes into the soft provider's frame and datagram decoders: they must
//! never panic, whatever they accept must re-encode to the same bytes, and the head
//! decoder (the receiver decodes a frame's head before its payload arrives) must agree
//! with the whole-frame decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpc_transport::fuzzing::soft_wire;

fuzz_target!(|data: &[u8]| {
    soft_wire(data);
});
