//! Arbitrary bytes through the soft provider's shared-memory ring (pieces of any size,
//! the peer's published index possibly lying), then decoded as RC frames: nothing may
//! panic or read outside the ring, and an honest ring must deliver the bytes unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpc_transport::fuzzing::shm_ring;

fuzz_target!(|data: &[u8]| {
    shm_ring(data);
});
