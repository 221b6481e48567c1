//! Arbitrary bytes into the soft provider's frame and datagram decoders: they must
//! never panic, and whatever they accept must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpc_transport::fuzzing::soft_wire;

fuzz_target!(|data: &[u8]| {
    soft_wire(data);
});
