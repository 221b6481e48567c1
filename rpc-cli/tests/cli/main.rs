//! `rdma-rpc` end to end: each subcommand run as a process against the example
//! services served by the test on 127.0.0.1.

mod bad_input;
mod bench;
mod call;
mod list_describe;
mod streaming;
mod support;
