//! What one `server_stream` message costs before any transport touches it: the
//! ceiling no system's single stream can pass in this run.
//!
//! Every system's stream does at least this per message: the server clones the
//! message the stream yields and encodes it (prost, into a reused buffer); the
//! client decodes it from the bytes it arrived in and drops it; the harness reads
//! the clock once (the gap it records). The client's share runs on one task, so one
//! stream's reader cannot pass `1 / (decode + clock)`, nor its writer `1 / encode`,
//! whatever carries the bytes between them. Measured in this process after the
//! cells, on the message type of the cells (`proto/echo_stream.proto`'s `Chunk`):
//! the same machine and the same load as the figures it is printed beside.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use prost::Message;
use serde::Serialize;

use crate::proto::rdma_stream::Chunk;
use crate::report::{cell_of, size_label, Run};
use crate::system::System;
use crate::workload::Workload;

/// How long each part is timed, per message size.
const TIMED: Duration = Duration::from_millis(100);
/// Bytes the encoding buffer holds before it is cleared (a reused buffer, as a
/// writer's frames are, rather than one that grows for the whole timing).
const BUFFER: usize = 256 * 1024;

/// Nanoseconds per message of each part, and the ceiling they make.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Floor {
    pub(crate) payload_bytes: usize,
    /// Clone of the yielded message and its encoding, length-prefixed, on the server.
    pub(crate) encode_ns: f64,
    /// Decoding from a shared buffer and dropping the message, on the client.
    pub(crate) decode_ns: f64,
    /// One `Instant::now()`, the harness's per-message record.
    pub(crate) clock_ns: f64,
    /// Messages/s one stream cannot pass: the slower of its reader (decode and
    /// clock) and its writer (encode).
    pub(crate) stream_max_msgs_per_s: f64,
}

impl Floor {
    /// Times each part for [`TIMED`] on messages of `size` bytes.
    pub(crate) fn measure(size: usize) -> Floor {
        let chunk = Chunk {
            payload: Bytes::from(vec![0x5a; size]),
        };
        let mut buf = BytesMut::with_capacity(BUFFER + size + 16);
        let encode_ns = per_message(|| {
            let m = black_box(&chunk).clone();
            if buf.len() > BUFFER {
                buf.clear();
            }
            m.encode_length_delimited(&mut buf)
                .expect("the buffer grows as needed");
        });
        let encoded = Bytes::from(chunk.encode_to_vec());
        let decode_ns = per_message(|| {
            let m = Chunk::decode(black_box(&encoded).clone()).expect("a valid message");
            black_box(m.payload.len());
        });
        let clock_ns = per_message(|| {
            black_box(Instant::now());
        });
        let slowest = (decode_ns + clock_ns).max(encode_ns);
        Floor {
            payload_bytes: size,
            encode_ns,
            decode_ns,
            clock_ns,
            stream_max_msgs_per_s: 1e9 / slowest,
        }
    }
}

/// The lines printed under the `server_stream` table: each size's parts and
/// ceiling, and the ceiling against tonic's one-stream cell of the same size.
pub(crate) fn note(floors: &[Floor], runs: &[Run]) -> String {
    if floors.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "server_stream ceiling, with no transport (prost encode | decode + one clock read, \
         per message, timed here after the cells): one stream passes neither side\n",
    );
    let stream = Workload::ServerStream.name();
    for f in floors {
        let tonic = cell_of(runs, System::Tonic, stream, f.payload_bytes, 1);
        let vs_tonic = tonic.map_or(String::new(), |t| {
            format!(
                ", {:.2}× tonic's one stream",
                f.stream_max_msgs_per_s / t.calls_per_s
            )
        });
        s += &format!(
            "  {:>7}: encode {:.0} ns | decode {:.0} ns + clock {:.0} ns: at most {} msgs/s{vs_tonic}\n",
            size_label(f.payload_bytes),
            f.encode_ns,
            f.decode_ns,
            f.clock_ns,
            rate(f.stream_max_msgs_per_s),
        );
    }
    s
}

/// A rate in M or k when that keeps a digit after the point.
fn rate(per_s: f64) -> String {
    match per_s {
        r if r >= 1e6 => format!("{:.1} M", r / 1e6),
        r if r >= 1e3 => format!("{:.1} k", r / 1e3),
        r => format!("{r:.0}"),
    }
}

/// Mean nanoseconds of `f`, run in batches until [`TIMED`] has passed.
fn per_message(mut f: impl FnMut()) -> f64 {
    const BATCH: u64 = 1024;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < TIMED {
        for _ in 0..BATCH {
            f();
        }
        n += BATCH;
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_is_the_slower_side_of_a_stream() {
        let f = Floor::measure(32);
        for part in [f.encode_ns, f.decode_ns, f.clock_ns] {
            assert!(part > 0.0 && part.is_finite(), "{f:?}");
        }
        let reader = 1e9 / (f.decode_ns + f.clock_ns);
        let writer = 1e9 / f.encode_ns;
        assert_eq!(f.stream_max_msgs_per_s, reader.min(writer), "{f:?}");
    }

    #[test]
    fn rates_keep_a_digit_at_every_size() {
        assert_eq!(rate(21_400_000.0), "21.4 M");
        assert_eq!(rate(24_300.0), "24.3 k");
        assert_eq!(rate(12.0), "12");
    }
}
