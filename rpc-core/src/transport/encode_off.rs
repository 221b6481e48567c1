//! Encoding a large message without holding the worker's other tasks.
//!
//! Encoding a body by reference is a copy of the whole message into registered
//! memory: 512 KiB and more, ~50 µs and up, 64 MiB tens of milliseconds. Done on
//! a tokio worker, it holds every task queued behind it there (its LIFO slot too,
//! which no other worker steals: tokio-rs/tokio#4941), such as the driver that
//! delivers other calls' replies or a receive loop.

use crate::status::Status;

/// A server's response bodies from this size on are encoded off the worker: their
/// encoding outlasts the hand-off (`block_in_place`: a few µs).
pub(crate) const HAND_OFF_ENCODING_FROM: usize = 512 * 1024;

/// A client's request bodies from this size on are encoded on the blocking pool.
/// Its hop (waking a pool thread, then the caller again) costs about 0.1 ms on this
/// 2-core machine, far more than the server's: echoes of a `Vec` payload, p50 (p90),
/// alternating rounds without and with the hand-off at each size: 512 KiB 471-568
/// (579-725) → 564-626 (730-809) µs; 1 MiB 894-954 (1,112-3,038) → 910-1,058
/// (1,035-1,202) µs; 4 MiB 2,573-2,675 (2,853-3,062) → 2,579-2,726 (2,797-2,997)
/// µs. From 4 MiB on (a millisecond of copying and more) the hop is lost in the
/// noise; below, the copy holds the worker for less than a millisecond.
pub(crate) const HAND_OFF_REQUEST_ENCODING_FROM: usize = 4 << 20;

/// Stream messages from this size on are encoded off the worker, on both sides
/// (the client's way or the server's below): the hop that costs a unary call about
/// 0.1 ms here costs a stream its rate, since its messages follow each other.
/// `rpc-bench --workloads server_stream,bidi_pingpong --stream-sizes 1M,4M`, three
/// rounds alternating without and with a server hand-off from 512 KiB (msgs/s):
/// server stream 1 MiB 2,445, 2,310, 2,313 → 2,340, 2,318, 2,204; 4 MiB 1,236,
/// 1,170, 1,196 → 1,144, 1,140, 1,104; ping-pong 1 MiB 1,445, 1,461, 1,473 → 1,368,
/// 1,376, 1,224. From 4 MiB on a message's copy takes about 0.35 ms and more, and
/// holding the worker that long is what the hop is for; it still costs: three
/// rounds without and with these hand-offs, 4 MiB server stream 1,133, 1,240, 1,182
/// → 1,117, 1,106, 1,052 msgs/s, ping-pong 612, 588, 570 → 588, 564, 524.
pub(crate) const HAND_OFF_STREAM_ENCODING_FROM: usize = HAND_OFF_REQUEST_ENCODING_FROM;

/// The server's way: runs `encode`, a body of `len` bytes, so that however long it
/// takes it holds no other task. On tokio's multi-thread runtime a large one runs
/// under `block_in_place`, which hands this worker's queue to another thread
/// first; a receive loop woken on this worker just before would otherwise wait for
/// the encoding (`transport/unstranded.rs` covers the poller's own wakes, not every
/// interleaving: `tests/tests/large_fairness.rs` still saw it, rarely).
pub(crate) fn encode_off_worker(len: usize, encode: impl FnOnce()) {
    let multi_thread = || {
        tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
    };
    if len >= HAND_OFF_ENCODING_FROM && multi_thread() {
        tokio::task::block_in_place(encode);
    } else {
        encode();
    }
}

/// The client's way (from [`HAND_OFF_REQUEST_ENCODING_FROM`]): runs `encode` on
/// `owned` (a request and its region, a stream's source and its message's region)
/// on tokio's blocking pool, and hands `owned` back. Not `block_in_place`, which
/// panics on a current-thread runtime and inside a `LocalSet`, where client calls
/// also run; what is encoded is the call's own, so it can move to that thread.
pub(crate) async fn encode_on_blocking_pool<T: Send + 'static>(
    mut owned: T,
    encode: impl FnOnce(&mut T) + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(move || {
        encode(&mut owned);
        owned
    })
    .await
    .map_err(|e| {
        if e.is_panic() {
            Status::internal("encoding the request panicked")
        } else {
            Status::cancelled("the runtime shut down while the request was encoded")
        }
    })
}
