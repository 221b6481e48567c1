//! The verbs conformance suite: one test per rule of the provider-neutral API, run
//! unchanged against every provider.
//!
//! The device under test comes from `RDMA_RPC_TEST_DEVICE` (default `soft0`, a pair of
//! independent soft devices; a verbs device name such as `rxe0` opens that device
//! twice). A device that cannot be opened fails every test: nothing is skipped.
//!
//! A feature the device lacks (UD, immediate data, atomics: see `Device::caps`) is
//! not skipped: its tests assert that the device refuses it (`common::caps`). The
//! soft device's profiles make every such path run without special hardware:
//!
//! ```text
//! cargo test -p rpc-transport --test conformance
//! RDMA_RPC_SOFT_PROFILE=iwarp_like cargo test -p rpc-transport --test conformance
//! RDMA_RPC_SOFT_PROFILE=rc_only cargo test -p rpc-transport --test conformance
//! RDMA_RPC_TEST_DEVICE=rxe0 cargo test -p rpc-transport --features rdma --test conformance
//! ```
//!
//! Tests wait by polling with a deadline (`common::DEADLINE`), never by sleeping, and
//! check "nothing arrived" by what a later event proves, not by waiting for silence.

// A test binary exports nothing: `pub` in the fixtures means "visible to the test
// modules", which is all `unreachable_pub` would have us spell as `pub(crate)`.
#![allow(unreachable_pub)]

mod common;

mod atomics;
mod cq;
mod link;
mod mw;
mod placed_reads;
mod protection;
mod qp_state;
mod rdma;
mod rnr;
mod send_recv;
mod srq;
mod two_process;
mod ud;
