//! The wire format: the one place that says what every bit means.
//!
//! # Immediate data (32 bits, carried by every Send-with-Immediate)
//!
//! ```text
//!  31      28 27                                                0
//! +----------+---------------------------------------------------+
//! |   kind   |                     call id                       |
//! +----------+---------------------------------------------------+
//! ```
//!
//! `kind` tells the receiver how to read the slot before it touches it, and `call id`
//! (28 bits, chosen by the client, unique among its open calls) finds the call.
//!
//! # Flow control on RC
//!
//! The client drives everything (eRPC's model): every frame the client sends is
//! answered by exactly one frame from the server, and the server never sends anything
//! else. The client holds a **window** of tokens (receives the server holds for this
//! connection on its shared receive queue, and receives the client posts for
//! answers); each client frame takes one, and the token comes back when the answer's
//! receive slot has been reposted at the client. So neither side can ever send into an
//! empty receive queue (no RNR), and no credit-return traffic exists. The client
//! keeps its last free token for `CANCEL` frames, so a caller that gives up can always
//! tell the server, even while every other credit waits on a handler.
//! Streaming calls add server frames that answer nothing; they ride connection
//! credits of the server's own (see "Streaming calls" below).
//!
//! ## Windows granted out of the shared pool (brpc/eRPC-style)
//!
//! The window is not fixed at the handshake. The handshake grants the minimal
//! window, 2 (one call and the `CANCEL` token), and the server then moves it one
//! token at a time, on answers it sends anyway (no extra frame, no round trip):
//! * **Grant**: an answer flagged `GRANT` returns its token *and more*: one on a
//!   `RESP`, or the count in a `CR`'s second payload byte (1 if absent); the
//!   client's window grows by as many.
//! * **Revoke**: an answer flagged `REVOKE` does *not* return its token; the
//!   client's window shrinks by one. Never below 2.
//! * The flags ride in the `RESP` head's flags byte (bits 4 and 5, below) and in
//!   `CR`, whose payload is then `flags:u8 [count:u8]` (an empty `CR` is neither).
//!   `RESP_FRAG` carries neither: the server waits for the next answer.
//! * A client that ran out of call tokens (a caller waited in `poll_ready`) asks
//!   for more: it sets `WANT_CREDIT` (bit 4 of the `REQ` head's flags) on its next
//!   `REQ`, and, if it has no frame to send (its calls all wait on handlers), it
//!   sends a `WANT` frame (kind 14, call id 0) on its last token, which the server
//!   answers at once with a `CR` of call id 0 (carrying the grant, if any). At
//!   most one `WANT` is in flight, and after one answered without a grant the next
//!   waits until another answer arrives, so a server with nothing to give is not
//!   asked in a loop. A `CANCEL` that finds the last token taken by a `WANT` waits
//!   for its `CR`, one round trip. The server's policy
//!   (`transport::server::credit_pool`) decides what to grant; the wire only
//!   carries it.
//! * The first frame a peer sends on its queue pair proves its RDMA path; until
//!   then the server gives it nothing beyond the minimal window and a send ring of
//!   two slots, and it closes a peer that sends none within its handshake timeout.
//!   A client therefore sends a `WANT` right after the handshake: the proof, and
//!   the request for its working window (the server raises a proven connection to
//!   8 at once, pool permitting).
//! * Used only when both sides offered the `CREDIT_WINDOWS` capability at the
//!   handshake; otherwise the handshake's grant is the window for good.
//!
//! **Why RNR stays impossible.** Let `S` be the receives posted on the server's
//! SRQ that credits count (all but one spare, where the device has room for it).
//! For each connection the server keeps `window` (the client's window once it
//! has read every answer sent so far) and reserves `R >= window` slots of `S`, with
//! `sum(R) <= S`. Let `u` be the frames of the connection that hold or will take
//! an SRQ receive: sent by the client, not yet answered (a frame's slot is reposted
//! before its answer leaves: the poller reposts its batch's receives before it
//! posts the answers it corked, and a slot dropped on another thread, a handler's,
//! is reposted at once). The one frame whose answer may leave first, a batch's lone
//! frame answered uncorked, reposts before the next batch and is covered by the
//! spare. Each holds a client token, so `u <= w`, the client's current window. A
//! grant: the server reserves the slot (`R += 1`) *before* the
//! flagged answer leaves, so `w <= window <= R` throughout. A revoke: once the
//! flagged answer leaves, the frame it answers no longer counts in `u`, and its token
//! is never returned, so `u <= window` at once even though the client's `w` shrinks
//! only later; the server releases that slot (`R -= 1`) after posting the answer.
//! Hence `sum(u) <= sum(R) <= S` at every moment: every frame finds a receive. On
//! the client, the window's receives are posted before a granted token is used (the
//! driver grows its receive pool in the batch that read the grant, before it sends),
//! and each frame has exactly one answer, so answers in flight `<= w <=` receives.
//!
//! # Frame kinds (the top 4 bits of the immediate; bytes at the head of the slot, big endian)
//!
//! | kind | on | dir | name | payload |
//! | --- | --- | --- | --- | --- |
//! | 0 | — | — | — | never valid (an all-zero immediate is malformed) |
//! | 1 | RC, UD | c→s | `REQ` | [`RequestHead`] (16 bytes), path, metadata, first body chunk |
//! | 2 | RC | c→s | `REQ_FRAG` | `offset:u32`, next body chunk; answered by `CR` or an early `RESP` |
//! | 3 | RC | c→s | `RFR` | nothing: "send the next fragment of the response" |
//! | 4 | RC | c→s | `CANCEL` | nothing: forget the call; answered by `CR` (a running call's `REQ` is then answered at once with `CANCELLED`) |
//! | 5 | RC, UD | s→c | `RESP` | [`ResponseHead`] (10 bytes), status message, metadata, first body chunk |
//! | 6 | RC | s→c | `RESP_FRAG` | `offset:u32`, next body chunk (answers an `RFR`) |
//! | 7 | RC | s→c | `CR` | nothing, or one byte of credit flags (`GRANT`/`REVOKE`): the credit return that answers a frame with no other answer |
//! | 8 | UD | s→c | `IN_PROGRESS` | nothing: "the call is running, keep waiting" (see [`crate::engine::ud::wire`]) |
//! | 9 | RC | both | `MSG` | `offset:u32 total:u32`, a chunk of one stream message; or, flagged `BATCH`, whole messages (below) |
//! | 10 | RC | c→s | `HALF_CLOSE` | nothing: the client sends no more messages on this call |
//! | 11 | RC | s→c | `TRAILERS` | the `RESP` layout: the streaming call's final status, ends it |
//! | 12 | RC | c→s | `RESET` | `code:u8`: the client ends the call now (cancelled, deadline, refused) |
//! | 13 | RC | both | `CREDIT` | `n:u32`: `n` more bytes of message credit on this call; with call id 0, `n` connection credits (s→c frames) to the server |
//! | 14 | RC | c→s | `WANT` | nothing, call id 0: "my callers wait for a token"; answered by `CR` with call id 0 (see "Windows granted out of the shared pool") |
//! | 15 | RC | both | `RDONE` | nothing: "I read the response's region, reuse it" (c→s, a unary call); or, call id 0, `addr:u64`: "I am done with the stream message lent at `addr`" (either way; see "Large messages by reference"). c→s answered by `CR`; s→c on a connection credit |
//!
//! A kind that a side does not expect (an unassigned one, `IN_PROGRESS` on RC, `CR`
//! on UD, a stream kind on UD, a server kind sent to the server) is malformed: dropped and counted, and on RC
//! still answered by `CR` so that the peer's credits stay balanced.
//!
//! # Bodies and fragments (RC)
//!
//! A message whose head and body fit one slot travels as one frame. A larger body is
//! cut into fragments: the first frame says the total body length, each continuation
//! carries its offset (RC delivers in order; the offset lets the receiver reject a
//! gap instead of corrupting the message). Request fragments are pushed (each answered
//! by `CR`); response fragments are pulled by one `RFR` each, so the server never
//! sends more than the client has receives for. A head (path and metadata, or status
//! message and metadata) must fit the first frame.
//!
//! # The body of a `RESP`
//!
//! With `code = 0` (OK) the body is the response message. With any other code the
//! body is the status's **details** (opaque bytes, e.g. an encoded
//! `google.rpc.Status`; empty if the status has none): they travel exactly as a
//! response message does, in the first frame and, on RC, in fragments pulled by
//! `RFR`s (bounded by the max message and the server connection's buffer cap); on UD
//! within the one datagram. How a status that does not fit is cut is
//! [`crate::engine::codec`]'s rule: the code never changes, the message is cut at a
//! char boundary, metadata and details are dropped whole, counted and logged, never
//! silently.
//!
//! # Flags (byte 4 of a `REQ` head, byte 5 of a `RESP` head)
//!
//! A frame with a flag its receiver does not know is malformed, so that a flag
//! changing what a frame means can be added without an old receiver misreading it.
//! * bit 1, [`STREAM_FLAG`] (sent): on a `REQ`, the call is streaming (below); its
//!   body is empty, and its messages follow as `MSG`s. On a `RESP`, the frame is a
//!   streaming call's response headers: the call goes on (its messages and `TRAILERS`
//!   follow). A `RESP` without it ends its call, whatever the call's shape.
//!
//! Credit windows (RC only, with `CREDIT_WINDOWS`; see "Windows granted out of the
//! shared pool" above; a UD receiver ignores them):
//! * bit 4, `WANT_CREDIT` (`REQ`): the client ran out of call tokens; it would use
//!   a larger window.
//! * bit 4, `GRANT` (`RESP`, and a `CR`'s payload byte): this answer's token
//!   returns, and one more.
//! * bit 5, `REVOKE` (`RESP`, and a `CR`'s payload byte): this answer's token does
//!   not return. Never with `GRANT`.
//!
//! * bit 6, [`BY_REF`] (both heads, RC only): the body is not inline; in its place
//!   the frame carries a [`Descriptor`] (below). A UD receiver treats it as any
//!   unknown flag (malformed): UD keeps one datagram per message.
//! * bit 7, [`GATHER`] (both heads, always with `BY_REF`): in place of the
//!   descriptor, a gather list (below). Without `BY_REF`, malformed.
//!
//! # Large messages by reference (RC, "rendezvous")
//!
//! A unary body longer than the sender's rendezvous threshold, when the connection
//! can do RDMA Read (both devices, the handshake's caps), is encoded once into a
//! registered region of the sender's pool and announced by a descriptor in the
//! `REQ` / `RESP` frame, after the head, path/status message and metadata, in place
//! of the body:
//!
//! ```text
//! 0 addr:u64  8 rkey:u32  12 len:u32        (DESCRIPTOR_LEN = 16 bytes, big endian)
//! ```
//!
//! `len` equals the head's `body_len` and is never 0 (an empty body is inline), and
//! the descriptor is all of the frame after the metadata; anything else is
//! malformed. The receiver checks `len` against its max message (refusing a longer
//! one with `RESOURCE_EXHAUSTED`, reading nothing), pulls the bytes with RDMA Read
//! (several Reads of at most the device's max message size each, when one would
//! exceed it) into a region of its own pool, and decodes from there. Releases:
//! * A request's region: the server answers the `REQ` (with its `RESP`, or a status
//!   if refused or cancelled) only once its Read completed or failed, so the client
//!   reuses the region when the `REQ`'s answer arrives (or the connection dies).
//! * A response's region: the client sends `RDONE` (call id of the call) once its
//!   Read completed (or failed: it will not read again), answered by `CR`. The server
//!   also releases it on the call's `CANCEL` and when the connection dies. A `RESP`
//!   by reference is thus one frame each way more than an inline one, in place of
//!   an `RFR` and its fragment per 8 KiB.
//!
//! A Read of memory outside the regions the sender lent fails at the reader as
//! hardware fails it (`REM_ACCESS_ERR`), which puts both QPs in error: the connection
//! ends, its calls end `UNAVAILABLE`, other connections are untouched.
//!
//! **Gather lists** (a `REQ` or `RESP` flagged [`BY_REF`] | [`GATHER`]): the bytes after the
//! metadata are a list of inline runs and references, [`super::gather`]'s layout,
//! which in order are the body (at most [`super::gather::MAX_GATHER_PARTS`] parts,
//! each at least a byte, summing to `body_len`, at least one reference, filling the
//! frame exactly; anything else is malformed as a bad descriptor is). The reader
//! takes one region of the body's length, copies the inline runs to their places
//! and posts the Reads of the references together, each into its place, then
//! decodes from the region as from a single descriptor's. Release is the single
//! descriptor's: one `RDONE` (or `CANCEL`, or the connection's end) frees every
//! reference of the list; a reference outside what the sender lent fails
//! `REM_ACCESS_ERR` as any Read does.
//!
//! Only to a client that offered the handshake capability `GATHER_LISTS` (bit 6;
//! others get a single descriptor). A server sends one when a large response's
//! encoding holds, as contiguous chunks
//! of at least `rpc_transport::msg::MIN_REF_BYTES` (16 KiB), bytes that lie in a
//! region of its **read pool** it shared as `Bytes` (a request body it received and
//! returns whole or in part: an echo, a forward, a slice), the rest of the encoding
//! (tags, lengths, short fields) fits `MAX_INLINE_BYTES` (1 KiB) of inline runs, and
//! the list fits the frame beside the metadata. Each reference is lent through a
//! memory window bound over exactly its range on the client's QP (so only where the
//! device has type-2 windows: the read pool's regions are registered `LOCAL_WRITE |
//! MW_BIND` there and grant nothing through their own rkey; without windows the
//! read pool grants no remote access at all and such responses are copied as
//! before), and the region is held (`SharedRegion`, found by address in the pool's
//! list of regions shared as `Bytes`) until the windows' invalidations after the
//! `RDONE` completed, whatever the handler dropped.
//!
//! A client sends a `REQ` as a list only to a server that granted
//! `GATHER_REQUESTS` (bit 7), and only on the soft provider: when the request's
//! encoding holds `Bytes` chunks of at least `MIN_REF_BYTES` (prost's `bytes::Bytes`
//! fields, which the encoder sees whole) and the rest fits `MAX_INLINE_BYTES`, each
//! chunk is registered where it lies, REMOTE_READ only, as its own region of
//! exactly its bytes (`ProtectionDomain::register_bytes`), and deregistered at the
//! `REQ`'s answer or the connection's end; the registration holds the chunk alive
//! meanwhile. The server reads it as a single descriptor's request: the head
//! first, then the parts in place, one region. Stream messages are still encoded
//! into a lend region (single descriptor): see `docs/large-messages.md`.
//!
//! **Stream messages** (both directions, same threshold and condition): a `MSG`
//! whose `total` has bit 31 ([`MSG_RENDEZVOUS`]) set carries, after its 8-byte head
//! (`offset` 0), a descriptor of the whole message instead of a chunk; `total &
//! !MSG_RENDEZVOUS` is its length, and the descriptor's `len` equals it (anything
//! else, `BATCH` with it included, is malformed). One frame, one message: the
//! receiver pulls it with RDMA Read into its own pool and delivers it in its place
//! among the call's messages (inline messages that arrive meanwhile, and the
//! half-close or trailers after them, wait for it: order is kept). It is charged to
//! the call's window as an inline message of its length (its body, not its
//! descriptor), so the per-call bound below holds whatever the path, and one
//! reader's unread messages never fill the pool other calls read into. Releases:
//! the reader sends `RDONE` on **call id 0** carrying the descriptor's `addr:u64`
//! once it will not read the message any more (its Read completed or failed, or it
//! refused the message unread: too long, beyond its credit, the call ended), for
//! every by-reference `MSG` it got whose descriptor it could parse, whether or not
//! the call still runs (c→s answered by `CR`; s→c on a connection credit, ahead of
//! other server frames). The sender keys lent messages by address (unique among
//! its regions in use) and frees a region on its `RDONE` and when the connection
//! ends, never on the call's end or reset: a reader owes an `RDONE` for every such
//! `MSG`, so a region is never reused while its reader may still read it, and a
//! late `RDONE` never frees a region lent again since. An `RDONE` naming no region
//! lent on its connection is counted malformed and ignored. A peer that withholds
//! `RDONE`s holds the sender's pool as one that never reads a unary response does
//! (until the connection ends).
//!
//! # Streaming calls (RC): a call as two half-streams
//!
//! A call is two half-streams of messages, client→server and server→client, each
//! ended by end-of-stream; the call ends with a final status (trailers) from the
//! server, or at once with a `RESET` from the client. Unary calls keep the path above
//! (one frame each way for small calls); nothing below costs them anything.
//! * **Ids.** The client allocates streaming calls' ids with bit 27 set
//!   ([`STREAM_ID_BIT`]) and unary ones with it clear, so that a frame finds its
//!   table by its id; the server keys both by id and checks the shape anyway.
//! * **Open.** A `REQ` flagged `STREAM` (path, metadata, timeout; empty body) opens
//!   the call. The client does not wait for a first message to open it (a bidi
//!   client may send only after reading). The `REQ` is answered, as any `REQ`, by one
//!   `RESP`: sent when the server's handler returns its response, before any message
//!   (so a ping-pong works), flagged `STREAM` and carrying the response metadata
//!   (headers). A handler that fails instead answers with a plain error `RESP`
//!   ("trailers-only"), which ends the call. The `RESP` of a streaming call always
//!   fits one frame (error details that do not are dropped, counted and logged, as
//!   `codec` does when nobody can pull them).
//! * **Messages.** A message travels in a `MSG` of one of two shapes, told apart by
//!   bit 30 of its second head word (`BATCH`, below):
//!   - a **chunk**: `offset:u32 total:u32`, then the bytes `offset..` of a message
//!     of `total` bytes. A message longer than a frame is cut into `MSG`s of
//!     consecutive offsets, sent back to back in order (RC keeps them in order; the
//!     offset lets the receiver reject a gap instead of corrupting the message).
//!     Messages above the rendezvous threshold go by reference instead (one
//!     `MSG`, see "Large messages by reference"), where both sides can do RDMA
//!     Read. A lone message that fits a frame is one chunk (`offset` 0, `total`
//!     its length).
//!   - a **batch** of whole messages (coalescing: a writer that finds several
//!     messages ready when the send path is free packs them into one frame; it
//!     never waits for more):
//!
//!     ```text
//!     0 count:u32  4 BATCH | bytes:u30  8 len:u32 message  len:u32 message ...
//!     ```
//!     `count` (at least 1) entries of `len:u32` and `len` bytes follow the head,
//!     back to back, and fill the frame exactly: `bytes` is the frame's length
//!     after the head. A batch never carries part of a message (a message that does
//!     not fit the space left goes first in the next frame, in a batch or as
//!     chunks), and never starts while a message is half received. A batch whose
//!     entries do not add up (a `len` beyond the frame, a count that differs, bytes
//!     left over) is malformed as a whole before any of its messages is delivered:
//!     the receiver counts it and ends the call `INTERNAL`, as any malformed `MSG`;
//!     the connection's credits stay balanced (the frame is answered or counted as
//!     any other), and it never panics.
//!
//!   Head bits of the second word: bit 31 is `RENDEZVOUS` (a descriptor follows,
//!   see "Large messages by reference"; a connection without RDMA Read agreed
//!   treats it as malformed). Bit 30 is `BATCH`. A chunk's `total` is therefore below 2^30
//!   (max messages are far smaller).
//!
//!   A message is bounded by the receiver's max message: a server refusing a
//!   longer one ends the call with
//!   `TRAILERS` `RESOURCE_EXHAUSTED`; a client refusing one sends `RESET`
//!   `RESOURCE_EXHAUSTED` and ends the call so itself; a sender that knows the
//!   peer's limit (exchanged at the handshake) refuses before sending, and does the
//!   same.
//! * **Ends.** `HALF_CLOSE` ends the client's half-stream. The server's half ends
//!   with `TRAILERS` (the `RESP` layout, code and message and trailing metadata, the
//!   details as its body, cut to the frame), which also ends the call: later client
//!   frames of the call are answered and dropped. `RESET` (`code:u8`, the client's
//!   reason: `CANCELLED` when it stopped reading, `DEADLINE_EXCEEDED`,
//!   `RESOURCE_EXHAUSTED`) ends both halves at once: the server stops the handler
//!   and drops its producer.
//! * **Deadlines.** Both sides keep the `REQ`'s timeout: the client resets the call
//!   (`RESET` `DEADLINE_EXCEEDED`) at its deadline; the server, counting from the
//!   `REQ`'s arrival, ends the call itself at its own (the `REQ`'s timeout, or its
//!   own cap on a call, `Server::timeout`, whichever comes first): `DEADLINE_EXCEEDED` as the
//!   `REQ`'s answer if the handler has not answered, else as `TRAILERS` (the rest of
//!   a long message is not sent), and it drops the producer. So a stream stops at
//!   its deadline even when the client went silent; whichever end comes second
//!   finds the call ended and is dropped.
//! * **Answers.** Every client frame still gets exactly one answer (`MSG`,
//!   `HALF_CLOSE`, `RESET` and `CREDIT` are answered at once by `CR`; a `REQ` by its
//!   `RESP`), so the client's credits work as above, unchanged.
//! * **Message credits (per call, each way), in bytes.** A side may begin a
//!   call's message only while the credit its peer granted is above zero:
//!   [`STREAM_WINDOW`] bytes at open, plus the `n` of every `CREDIT` for the call.
//!   A receiver whose window is larger (`initial_stream_window_size`) grants the
//!   difference by a `CREDIT` of its own: the server as the call opens, the client
//!   once the call's headers (`RESP`) arrived, when the server surely knows the
//!   call. A window is never smaller than [`STREAM_WINDOW`].
//!   Each message costs its *charge*, its length plus [`MESSAGE_CHARGE`] (what the
//!   receiver spends holding it beside its bytes), taken when it begins, so the
//!   credit may go below zero by up to one charge; both sides count it alike
//!   (signed). Counting bytes, not messages, lets thousands of small messages
//!   stream ahead of their reader while large ones are held to a few. A receiver
//!   grants back the charges of the messages its reader took, once they add up to
//!   a quarter of its window ([`STREAM_GRANT_AT`] by default: few `CREDIT`
//!   frames), so a slow reader stops only its own producer. A message counts once, however many
//!   `MSG`s carry it. **Bound:** per call and direction, a receiver buffers
//!   charges of less than its window + one charge (a message begins only with
//!   credit left), by default under 1 MiB + one max message of bytes: 16 messages
//!   of 64 KiB, 16,384 of 32 B, whether they came inline or by reference. Stream
//!   messages are copied out of their receive slot (or read into the receiver's
//!   pool), which is reposted at once: a slow reader never holds the connection's
//!   receives.
//! * **Connection credits (server).** Server frames other than answers (`MSG`,
//!   `TRAILERS`, `CREDIT`, `RDONE`) need receives the client posted for them. The server
//!   starts a connection with none: the client keeps [`SERVER_CREDITS`] receives
//!   posted beyond its window only from its first streaming call on (until then
//!   its receives follow its window alone), and grants them once posted with a
//!   `CREDIT` on call id 0 of `n` = [`SERVER_CREDITS`]; each such server frame
//!   takes one (the first stream's `RESP` needs none: it is an answer). The client
//!   returns them with `CREDIT` on call id 0 once half are reposted (a client frame,
//!   answered by `CR`). The client's frames that are answered at once (`MSG`
//!   excepted) may use its last credit, as `CANCEL` does, so a connection whose
//!   other credits wait on slow handlers still returns the server's credits. RNR
//!   stays impossible: every frame either side sends lands in a receive counted for
//!   it.
//! * **Fairness.** A call's writer sends one frame (one message, or one batch of
//!   the messages it had ready) and then waits its turn again behind the
//!   connection's other calls with credit and data; the later `MSG`s of long
//!   messages and the control frames take turns round-robin among the calls that
//!   have them.
//! * UD keeps one datagram each way: no streams (a UD channel opens RC for them).

use crate::code::Code;
use std::time::Duration;

/// Bits of the immediate that carry the call id.
pub const CALL_ID_BITS: u32 = 28;
/// Mask of the call id in the immediate.
pub const CALL_ID_MASK: u32 = (1 << CALL_ID_BITS) - 1;

/// Bytes of the fixed part of a `REQ` frame.
pub const REQUEST_HEAD_LEN: usize = 16;
/// Bytes of the fixed part of a `RESP` frame.
pub const RESPONSE_HEAD_LEN: usize = 10;
/// Bytes of the fixed part of a fragment frame.
pub const FRAG_HEAD_LEN: usize = 4;

/// `REQ` / `RESP` flag: the body travels by reference, a [`Descriptor`] in its place.
pub const BY_REF: u8 = 0x40;
/// Bytes of a [`Descriptor`].
pub const DESCRIPTOR_LEN: usize = 16;
/// `RESP` flag, with [`BY_REF`]: a gather list ([`super::gather`]) in place of the
/// single descriptor.
pub const GATHER: u8 = 0x80;

/// Where a message sent by reference lies in the sender's registered memory: what
/// the receiver's RDMA Read names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Descriptor {
    /// Virtual address of the first byte, at the sender.
    pub addr: u64,
    /// Remote key of the region holding it.
    pub rkey: u32,
    /// Bytes of the message (never 0).
    pub len: u32,
}

impl Descriptor {
    /// Encodes into the first [`DESCRIPTOR_LEN`] bytes of `out`.
    pub fn write(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.addr.to_be_bytes());
        out[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        out[12..16].copy_from_slice(&self.len.to_be_bytes());
    }

    /// Decodes a descriptor that must be exactly `b` (a frame's bytes after its
    /// metadata) and describe `body_len` bytes. Addresses are not checked here: the
    /// sender's device checks them against its regions, as it does any Read.
    pub fn read(b: &[u8], body_len: u32) -> Result<Descriptor, Malformed> {
        let b: &[u8; DESCRIPTOR_LEN] = b
            .try_into()
            .map_err(|_| Malformed("a body by reference whose descriptor is not 16 bytes"))?;
        let d = Descriptor {
            addr: u64::from_be_bytes(b[0..8].try_into().expect("8 bytes")),
            rkey: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            len: u32::from_be_bytes(b[12..16].try_into().expect("4 bytes")),
        };
        if d.len != body_len {
            return Err(Malformed("a descriptor whose length is not the body's"));
        }
        if d.len == 0 {
            return Err(Malformed("an empty body by reference"));
        }
        if d.addr.checked_add(u64::from(d.len)).is_none() {
            return Err(Malformed("a descriptor that wraps the address space"));
        }
        Ok(d)
    }
}

/// Checks the bytes after a head's metadata: a body chunk no longer than the body,
/// or with [`BY_REF`] exactly a descriptor of the body.
fn check_body(flags: u8, rest: &[u8], body_len: u32, what: &'static str) -> Result<(), Malformed> {
    if flags & GATHER != 0 {
        if flags & BY_REF == 0 {
            return Err(Malformed("a gather list without BY_REF"));
        }
        return super::gather::Gather::read(rest, body_len).map(|_| ());
    }
    if flags & BY_REF != 0 {
        return Descriptor::read(rest, body_len).map(|_| ());
    }
    if rest.len() as u64 > u64::from(body_len) {
        return Err(Malformed(what));
    }
    Ok(())
}

/// `REQ` flag: the client ran out of call tokens and would use a larger window.
pub const REQ_WANT_CREDIT: u8 = 0x10;
/// `RESP` / `CR` flag: the answer's token returns, and one more.
pub const CREDIT_GRANT: u8 = 0x10;
/// `RESP` / `CR` flag: the answer's token does not return.
pub const CREDIT_REVOKE: u8 = 0x20;
/// Byte of a `REQ` head that holds its flags.
pub const REQ_FLAGS_AT: usize = 4;
/// Byte of a `RESP` head that holds its flags.
pub const RESP_FLAGS_AT: usize = 5;

/// How an answer moves the client's window (see "Windows granted out of the shared
/// pool").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CreditAdjust {
    /// The token returns: the window stays.
    #[default]
    Keep,
    /// The token returns with this many more (1 on a `RESP`, up to 255 on a `CR`).
    Grant(u8),
    /// The token does not return.
    Revoke,
}

impl CreditAdjust {
    /// The flag bits.
    pub fn bits(self) -> u8 {
        match self {
            CreditAdjust::Keep => 0,
            CreditAdjust::Grant(_) => CREDIT_GRANT,
            CreditAdjust::Revoke => CREDIT_REVOKE,
        }
    }

    /// Reads the flag bits (and a `CR`'s count); both flags at once is malformed.
    fn read(b: u8, count: Option<u8>) -> Result<CreditAdjust, Malformed> {
        match b & (CREDIT_GRANT | CREDIT_REVOKE) {
            0 => Ok(CreditAdjust::Keep),
            CREDIT_GRANT => match count.unwrap_or(1) {
                0 => Err(Malformed("a credit grant of 0")),
                n => Ok(CreditAdjust::Grant(n)),
            },
            CREDIT_REVOKE => Ok(CreditAdjust::Revoke),
            _ => Err(Malformed("an answer that both grants and revokes a credit")),
        }
    }

    /// What an answer of `kind` with bytes `frame` says (only `RESP` and `CR` carry
    /// credit flags; anything else keeps the window).
    pub fn of(kind: Kind, frame: &[u8]) -> Result<CreditAdjust, Malformed> {
        match kind {
            Kind::Resp => frame
                .get(RESP_FLAGS_AT)
                .map_or(Ok(CreditAdjust::Keep), |b| Self::read(*b, None)),
            Kind::Cr => frame.first().map_or(Ok(CreditAdjust::Keep), |b| {
                Self::read(*b, frame.get(1).copied())
            }),
            _ => Ok(CreditAdjust::Keep),
        }
    }

    /// Writes a `CR`'s payload for this adjustment: its length.
    pub fn write_cr(self, out: &mut [u8]) -> usize {
        match self {
            CreditAdjust::Keep => 0,
            CreditAdjust::Grant(1) | CreditAdjust::Revoke => {
                out[0] = self.bits();
                1
            }
            CreditAdjust::Grant(n) => {
                out[0] = CREDIT_GRANT;
                out[1] = n;
                2
            }
        }
    }
}

/// Frame kinds (the top 4 bits of the immediate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// First (or only) frame of a request.
    Req = 1,
    /// Continuation of a request body.
    ReqFrag = 2,
    /// Request for the next response fragment.
    Rfr = 3,
    /// The client gives up on a call.
    Cancel = 4,
    /// First (or only) frame of a response.
    Resp = 5,
    /// Continuation of a response body.
    RespFrag = 6,
    /// Credit return (RC only): an answer with nothing to say.
    Cr = 7,
    /// "Still running, keep waiting" (UD only): the answer to a duplicate request of
    /// a call whose handler has not finished.
    InProgress = 8,
    /// A chunk of a stream message (RC only).
    Msg = 9,
    /// The client's end of its half-stream (RC only).
    HalfClose = 10,
    /// A streaming call's final status (RC only).
    Trailers = 11,
    /// The client ends a streaming call at once (RC only).
    Reset = 12,
    /// A grant of messages on a call, or of connection credits with call id 0.
    Credit = 13,
    /// The client's callers wait for a token (RC, with credit windows).
    Want = 14,
    /// A reader is done with a region lent by reference: the lender may reuse it
    /// (RC only).
    Rdone = 15,
}

/// The flag of a streaming `REQ`, and of a `RESP` carrying a stream's headers.
pub const STREAM_FLAG: u8 = 0b10;
/// Bit of the call id that marks a streaming call (the client allocates them apart).
pub const STREAM_ID_BIT: u32 = 1 << (CALL_ID_BITS - 1);
/// Bytes of message credit (charges, see [`charge`]) a side may send on a call
/// before its peer grants more; also the per-call, per-direction receive buffer
/// bound (plus one charge).
pub const STREAM_WINDOW: u32 = 1 << 20;
/// What a receiver spends holding a message beside its bytes (its buffer's
/// header and queue entry), charged to the window with each message so that a
/// window of tiny messages stays bounded in memory too.
pub const MESSAGE_CHARGE: u32 = 32;
/// Charges a reader takes before the receiver grants them back (one `CREDIT`) in
/// the default window (a quarter of a window); also what a reader's side gathers
/// before it tells the engine (one connection lock per grant at most).
pub const STREAM_GRANT_AT: u32 = STREAM_WINDOW / 4;
/// Connection credits a client grants the server on its first streaming call:
/// receives it posts for server frames that answer nothing (`MSG`, `TRAILERS`,
/// `CREDIT`), beyond its credits.
pub const SERVER_CREDITS: u32 = 64;
/// Bytes of the fixed part of a `MSG` frame.
pub const MSG_HEAD_LEN: usize = 8;
/// Bit of a `MSG` head's second word: the frame is a batch of whole messages.
pub const MSG_BATCH: u32 = 1 << 30;
/// Bit of a `MSG` head's second word: a descriptor of the message follows instead
/// of a chunk (see "Large messages by reference").
pub const MSG_RENDEZVOUS: u32 = 1 << 31;
/// Bytes of a stream message's `RDONE` payload (the lent message's address).
pub const RDONE_MSG_LEN: usize = 8;
/// Bytes before each message of a batch (its length).
pub const BATCH_ENTRY_HEAD: usize = 4;

/// The window charge of a message of `len` bytes.
pub fn charge(len: usize) -> u64 {
    len as u64 + u64::from(MESSAGE_CHARGE)
}

impl Kind {
    fn from_bits(v: u32) -> Option<Kind> {
        Some(match v {
            1 => Kind::Req,
            2 => Kind::ReqFrag,
            3 => Kind::Rfr,
            4 => Kind::Cancel,
            5 => Kind::Resp,
            6 => Kind::RespFrag,
            7 => Kind::Cr,
            8 => Kind::InProgress,
            9 => Kind::Msg,
            10 => Kind::HalfClose,
            11 => Kind::Trailers,
            12 => Kind::Reset,
            13 => Kind::Credit,
            14 => Kind::Want,
            15 => Kind::Rdone,
            _ => return None,
        })
    }
}

/// Packs a kind and a call id into an immediate.
pub fn imm(kind: Kind, call_id: u32) -> u32 {
    debug_assert!(call_id <= CALL_ID_MASK);
    ((kind as u32) << CALL_ID_BITS) | (call_id & CALL_ID_MASK)
}

/// Splits an immediate; `None` for an unknown kind.
pub fn parse_imm(imm: u32) -> Option<(Kind, u32)> {
    Kind::from_bits(imm >> CALL_ID_BITS).map(|k| (k, imm & CALL_ID_MASK))
}

/// Why a frame could not be read. Never a panic: the peer may send anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// Largest timeout a `REQ` head carries, in microseconds (56 bits: 2,284 years).
pub const MAX_TIMEOUT_US: u64 = (1 << 56) - 1;

/// Fixed part of a `REQ` frame.
///
/// ```text
/// 0 body_len:u32  4 flags:u8 (STREAM, WANT_CREDIT)  5 timeout_us:u56 (0 = none)  12 path_len:u16  14 meta_len:u16
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead {
    /// Total body length across all fragments.
    pub body_len: u32,
    /// Time the call may still take, in microseconds (0 = no deadline, at most
    /// [`MAX_TIMEOUT_US`]). Relative, so clocks need not agree.
    pub timeout_us: u64,
    /// Bytes of the path that follow the head.
    pub path_len: u16,
    /// Bytes of metadata that follow the path.
    pub meta_len: u16,
}

impl RequestHead {
    /// Encodes into the first [`REQUEST_HEAD_LEN`] bytes of `out`.
    pub fn write(&self, out: &mut [u8]) {
        debug_assert!(self.timeout_us <= MAX_TIMEOUT_US);
        out[0..4].copy_from_slice(&self.body_len.to_be_bytes());
        // Byte 4 (flags) is the top byte of the big-endian u64, 0 under the cap.
        out[4..12].copy_from_slice(&self.timeout_us.min(MAX_TIMEOUT_US).to_be_bytes());
        out[12..14].copy_from_slice(&self.path_len.to_be_bytes());
        out[14..16].copy_from_slice(&self.meta_len.to_be_bytes());
    }

    /// Decodes, checking that path and metadata lie inside `frame`.
    pub fn read(frame: &[u8]) -> Result<RequestHead, Malformed> {
        let b = frame
            .get(..REQUEST_HEAD_LEN)
            .ok_or(Malformed("request frame shorter than its head"))?;
        let flags = b[REQ_FLAGS_AT];
        if flags & !(STREAM_FLAG | REQ_WANT_CREDIT | BY_REF | GATHER) != 0 {
            return Err(Malformed("request head with flags this side does not know"));
        }
        let timeout = u64::from_be_bytes(b[4..12].try_into().expect("8 bytes"));
        let h = RequestHead {
            body_len: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            timeout_us: timeout & MAX_TIMEOUT_US,
            path_len: u16::from_be_bytes([b[12], b[13]]),
            meta_len: u16::from_be_bytes([b[14], b[15]]),
        };
        if h.body_start() > frame.len() {
            return Err(Malformed("request path/metadata beyond the frame"));
        }
        check_body(
            flags,
            &frame[h.body_start()..],
            h.body_len,
            "request body chunk longer than the body",
        )?;
        Ok(h)
    }

    /// Byte range of the path in the frame.
    pub fn path(&self) -> std::ops::Range<usize> {
        REQUEST_HEAD_LEN..REQUEST_HEAD_LEN + usize::from(self.path_len)
    }

    /// Byte range of the metadata in the frame.
    pub fn meta(&self) -> std::ops::Range<usize> {
        let s = self.path().end;
        s..s + usize::from(self.meta_len)
    }

    /// Offset of the first body byte in the frame.
    pub fn body_start(&self) -> usize {
        self.meta().end
    }

    /// The timeout, if any.
    pub fn timeout(&self) -> Option<Duration> {
        (self.timeout_us != 0).then(|| Duration::from_micros(self.timeout_us))
    }

    /// Encodes a timeout (rounded up so that a tiny timeout is not "none", capped at
    /// [`MAX_TIMEOUT_US`]).
    pub fn timeout_us_of(t: Option<Duration>) -> u64 {
        t.map_or(0, |t| {
            u64::try_from(t.as_micros())
                .unwrap_or(u64::MAX)
                .clamp(1, MAX_TIMEOUT_US)
        })
    }
}

/// Fixed part of a `RESP` frame.
///
/// ```text
/// 0 body_len:u32  4 code:u8  5 flags:u8 (STREAM, GRANT, REVOKE)  6 msg_len:u16  8 meta_len:u16
/// ```
/// `code` is the gRPC status code. With 0 (OK) the body is the response message;
/// otherwise `msg_len` bytes of UTF-8 status message follow the head and the body is
/// the status's details. Metadata (the response's, or the status's) follows the
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    /// Total body length across all fragments (the details, for an error).
    pub body_len: u32,
    /// gRPC status code.
    pub code: u8,
    /// Bytes of status message after the head.
    pub msg_len: u16,
    /// Bytes of metadata after the message.
    pub meta_len: u16,
}

impl ResponseHead {
    /// Encodes into the first [`RESPONSE_HEAD_LEN`] bytes of `out`.
    pub fn write(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.body_len.to_be_bytes());
        out[4] = self.code;
        out[5] = 0;
        out[6..8].copy_from_slice(&self.msg_len.to_be_bytes());
        out[8..10].copy_from_slice(&self.meta_len.to_be_bytes());
    }

    /// Decodes, checking that message and metadata lie inside `frame`.
    pub fn read(frame: &[u8]) -> Result<ResponseHead, Malformed> {
        let b = frame
            .get(..RESPONSE_HEAD_LEN)
            .ok_or(Malformed("response frame shorter than its head"))?;
        let flags = b[RESP_FLAGS_AT];
        if flags & !(STREAM_FLAG | CREDIT_GRANT | CREDIT_REVOKE | BY_REF | GATHER) != 0 {
            return Err(Malformed(
                "response head with flags this side does not know",
            ));
        }
        CreditAdjust::read(b[RESP_FLAGS_AT], None)?;
        let h = ResponseHead {
            body_len: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            code: b[4],
            msg_len: u16::from_be_bytes([b[6], b[7]]),
            meta_len: u16::from_be_bytes([b[8], b[9]]),
        };
        if h.body_start() > frame.len() {
            return Err(Malformed("response message/metadata beyond the frame"));
        }
        check_body(
            flags,
            &frame[h.body_start()..],
            h.body_len,
            "response body chunk longer than the body",
        )?;
        Ok(h)
    }

    /// Byte range of the status message.
    pub fn msg(&self) -> std::ops::Range<usize> {
        RESPONSE_HEAD_LEN..RESPONSE_HEAD_LEN + usize::from(self.msg_len)
    }

    /// Byte range of the metadata.
    pub fn meta(&self) -> std::ops::Range<usize> {
        let s = self.msg().end;
        s..s + usize::from(self.meta_len)
    }

    /// Offset of the first body byte.
    pub fn body_start(&self) -> usize {
        self.meta().end
    }

    /// The status code.
    pub fn code(&self) -> Code {
        Code::from_i32(i32::from(self.code))
    }
}

/// Marks a written `REQ` (its head at the start of `out`) as streaming.
pub fn set_request_stream(out: &mut [u8]) {
    out[4] |= STREAM_FLAG;
}

/// Whether a `REQ` frame opens a streaming call.
pub fn request_is_stream(frame: &[u8]) -> bool {
    frame.get(4).is_some_and(|f| f & STREAM_FLAG != 0)
}

/// Marks a written `RESP` (its head at the start of `out`) as a stream's headers.
pub fn set_response_stream(out: &mut [u8]) {
    out[5] |= STREAM_FLAG;
}

/// Whether a `RESP` frame carries a stream's headers (the call goes on).
pub fn response_is_stream(frame: &[u8]) -> bool {
    frame.get(5).is_some_and(|f| f & STREAM_FLAG != 0)
}

/// Marks a written `REQ` head as carrying its body by reference.
pub fn set_request_by_ref(out: &mut [u8]) {
    out[REQ_FLAGS_AT] |= BY_REF;
}

/// Whether a `REQ` frame carries its body by reference.
pub fn request_is_by_ref(frame: &[u8]) -> bool {
    frame.get(REQ_FLAGS_AT).is_some_and(|f| f & BY_REF != 0)
}

/// Whether a `REQ` frame carries its body as a gather list.
pub fn request_is_gather(frame: &[u8]) -> bool {
    frame.get(REQ_FLAGS_AT).is_some_and(|f| f & GATHER != 0)
}

/// Marks a written `RESP` head as carrying its body by reference.
pub fn set_response_by_ref(out: &mut [u8]) {
    out[RESP_FLAGS_AT] |= BY_REF;
}

/// Whether a `RESP` frame carries its body by reference.
pub fn response_is_by_ref(frame: &[u8]) -> bool {
    frame.get(RESP_FLAGS_AT).is_some_and(|f| f & BY_REF != 0)
}

/// Marks a written `RESP` head as carrying its body as a gather list.
pub fn set_response_gather(out: &mut [u8]) {
    out[RESP_FLAGS_AT] |= BY_REF | GATHER;
}

/// Whether a `RESP` frame carries its body as a gather list.
pub fn response_is_gather(frame: &[u8]) -> bool {
    frame.get(RESP_FLAGS_AT).is_some_and(|f| f & GATHER != 0)
}

/// Writes a `MSG` head: the chunk's offset in a message of `total` bytes.
pub fn write_msg_head(out: &mut [u8], offset: u32, total: u32) {
    debug_assert!(total & (MSG_BATCH | MSG_RENDEZVOUS) == 0);
    out[..4].copy_from_slice(&offset.to_be_bytes());
    out[4..MSG_HEAD_LEN].copy_from_slice(&total.to_be_bytes());
}

/// Writes a `MSG` announcing a whole message by reference; the frame's length.
pub fn write_msg_by_ref(out: &mut [u8], desc: &Descriptor) -> usize {
    debug_assert!(desc.len & (MSG_BATCH | MSG_RENDEZVOUS) == 0 && desc.len > 0);
    out[..4].copy_from_slice(&0u32.to_be_bytes());
    out[4..MSG_HEAD_LEN].copy_from_slice(&(MSG_RENDEZVOUS | desc.len).to_be_bytes());
    desc.write(&mut out[MSG_HEAD_LEN..]);
    MSG_HEAD_LEN + DESCRIPTOR_LEN
}

/// The descriptor of a `MSG` by reference, if `frame` is a well-formed one (a
/// cheap look at the head first: other `MSG`s are not parsed).
pub fn msg_by_ref(frame: &[u8]) -> Option<Descriptor> {
    let flagged = frame.get(4).is_some_and(|b| b & 0x80 != 0);
    match flagged.then(|| read_msg(frame)) {
        Some(Ok(MsgFrame::ByRef { desc, .. })) => Some(desc),
        _ => None,
    }
}

/// Writes a stream message's `RDONE` payload; its length.
pub fn write_rdone(out: &mut [u8], addr: u64) -> usize {
    out[..RDONE_MSG_LEN].copy_from_slice(&addr.to_be_bytes());
    RDONE_MSG_LEN
}

/// Reads a stream message's `RDONE` payload: the lent message's address.
pub fn read_rdone(frame: &[u8]) -> Result<u64, Malformed> {
    let b: [u8; RDONE_MSG_LEN] = frame
        .try_into()
        .map_err(|_| Malformed("RDONE of a stream message whose payload is not 8 bytes"))?;
    Ok(u64::from_be_bytes(b))
}

/// A `MSG` frame, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgFrame<'a> {
    /// A whole message by reference: its length and where it lies at the sender.
    ByRef {
        /// The message's length (the descriptor's `len`).
        total: u32,
        /// Where to read it.
        desc: Descriptor,
    },
    /// A chunk of one message: its offset, the message's total length, the bytes.
    Chunk {
        /// Where the chunk starts in the message.
        offset: u32,
        /// The message's length.
        total: u32,
        /// The chunk's bytes.
        chunk: &'a [u8],
    },
    /// Whole messages, checked to add up.
    Batch(Batch<'a>),
}

/// The entries of a batch `MSG` (checked when read: iterating cannot fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch<'a> {
    count: u32,
    entries: &'a [u8],
}

impl<'a> Batch<'a> {
    /// Messages in the batch.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The messages, in order.
    pub fn messages(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let entries = self.entries;
        self.spans().map(move |r| &entries[r])
    }

    /// The bytes after the head: the entries.
    pub fn entries(&self) -> &'a [u8] {
        self.entries
    }

    /// Where each message lies in [`Batch::entries`], in order.
    pub fn spans(&self) -> impl Iterator<Item = std::ops::Range<usize>> + 'a {
        let entries = self.entries;
        let mut at = 0;
        std::iter::from_fn(move || {
            let len = entries.get(at..at + BATCH_ENTRY_HEAD)?;
            let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
            let start = at + BATCH_ENTRY_HEAD;
            at = start + len;
            Some(start..at)
        })
    }
}

/// Reads a `MSG`: a chunk, or a batch whose entries are checked to fill the frame
/// exactly with `count` messages.
pub fn read_msg(frame: &[u8]) -> Result<MsgFrame<'_>, Malformed> {
    let b = frame
        .get(..MSG_HEAD_LEN)
        .ok_or(Malformed("stream message shorter than its head"))?;
    let first = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let second = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    let body = &frame[MSG_HEAD_LEN..];
    if second & MSG_RENDEZVOUS != 0 {
        if second & MSG_BATCH != 0 || first != 0 {
            return Err(Malformed(
                "stream message by reference with an offset or a batch",
            ));
        }
        let total = second & !MSG_RENDEZVOUS;
        let desc = Descriptor::read(body, total)?;
        return Ok(MsgFrame::ByRef { total, desc });
    }
    if second & MSG_BATCH == 0 {
        if u64::from(first) + body.len() as u64 > u64::from(second) {
            return Err(Malformed("stream message chunk beyond its total"));
        }
        return Ok(MsgFrame::Chunk {
            offset: first,
            total: second,
            chunk: body,
        });
    }
    if (second & !MSG_BATCH) as usize != body.len() {
        return Err(Malformed("message batch whose length is not its frame's"));
    }
    let mut rest = body;
    let mut n = 0u32;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<BATCH_ENTRY_HEAD>()
            .ok_or(Malformed("message batch entry cut in its length"))?;
        let len = u32::from_be_bytes(*len) as usize;
        rest = tail
            .get(len..)
            .ok_or(Malformed("message batch entry beyond its frame"))?;
        n += 1;
    }
    if n == 0 || n != first {
        return Err(Malformed("message batch count differs from its entries"));
    }
    Ok(MsgFrame::Batch(Batch {
        count: n,
        entries: body,
    }))
}

/// Packs whole messages into a batch `MSG` in `out` (a frame): push while they
/// fit, then [`BatchWriter::finish`].
#[derive(Debug)]
pub struct BatchWriter<'a> {
    out: &'a mut [u8],
    at: usize,
    count: u32,
}

impl<'a> BatchWriter<'a> {
    /// An empty batch over `out` (at least the head's length).
    pub fn new(out: &'a mut [u8]) -> Self {
        BatchWriter {
            out,
            at: MSG_HEAD_LEN,
            count: 0,
        }
    }

    /// The longest message that still fits.
    pub fn room(&self) -> usize {
        (self.out.len() - self.at).saturating_sub(BATCH_ENTRY_HEAD)
    }

    /// Messages pushed.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Appends a message of `len` bytes that `encode` writes, if it fits.
    pub fn push(&mut self, len: usize, encode: impl FnOnce(&mut [u8])) -> bool {
        if len > self.room() {
            return false;
        }
        let e = &mut self.out[self.at..self.at + BATCH_ENTRY_HEAD + len];
        e[..BATCH_ENTRY_HEAD].copy_from_slice(&(len as u32).to_be_bytes());
        encode(&mut e[BATCH_ENTRY_HEAD..]);
        self.at += BATCH_ENTRY_HEAD + len;
        self.count += 1;
        true
    }

    /// Writes the head; the frame's length.
    pub fn finish(self) -> usize {
        let bytes = (self.at - MSG_HEAD_LEN) as u32;
        self.out[..4].copy_from_slice(&self.count.to_be_bytes());
        self.out[4..MSG_HEAD_LEN].copy_from_slice(&(MSG_BATCH | bytes).to_be_bytes());
        self.at
    }
}

/// Writes a `CREDIT` payload; returns its length.
pub fn write_credit(out: &mut [u8], n: u32) -> usize {
    out[..4].copy_from_slice(&n.to_be_bytes());
    4
}

/// Reads a `CREDIT` payload.
pub fn read_credit(frame: &[u8]) -> Result<u32, Malformed> {
    let b = frame
        .get(..4)
        .ok_or(Malformed("credit frame shorter than its count"))?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Reads a `RESET` payload: the client's reason.
pub fn read_reset(frame: &[u8]) -> Result<Code, Malformed> {
    let b = frame
        .first()
        .ok_or(Malformed("reset frame without its code"))?;
    Ok(Code::from_i32(i32::from(*b)))
}

/// Writes a fragment head (its body offset).
pub fn write_frag_head(out: &mut [u8], offset: u32) {
    out[..FRAG_HEAD_LEN].copy_from_slice(&offset.to_be_bytes());
}

/// Reads a fragment head: the offset and the chunk.
pub fn read_frag(frame: &[u8]) -> Result<(u32, &[u8]), Malformed> {
    let b = frame
        .get(..FRAG_HEAD_LEN)
        .ok_or(Malformed("fragment shorter than its head"))?;
    Ok((
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        &frame[FRAG_HEAD_LEN..],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediate_round_trips_and_rejects_unknown_kinds() {
        for k in [
            Kind::Req,
            Kind::Rfr,
            Kind::Cr,
            Kind::RespFrag,
            Kind::InProgress,
        ] {
            assert_eq!(parse_imm(imm(k, CALL_ID_MASK)), Some((k, CALL_ID_MASK)));
            assert_eq!(parse_imm(imm(k, 7)), Some((k, 7)));
        }
        assert_eq!(parse_imm(0), None, "kind 0 stays invalid");
        assert_eq!(parse_imm(0x0000_0001), None);
        assert_ne!(
            Kind::InProgress as u8,
            Kind::Cr as u8,
            "one kind, one meaning"
        );
        for k in [
            Kind::Msg,
            Kind::HalfClose,
            Kind::Trailers,
            Kind::Reset,
            Kind::Credit,
            Kind::Want,
        ] {
            assert_eq!(parse_imm(imm(k, 5)), Some((k, 5)));
        }
        assert_eq!(
            parse_imm(15 << CALL_ID_BITS | 1),
            Some((Kind::Rdone, 1)),
            "kind 15 is RDONE"
        );
    }

    #[test]
    fn heads_round_trip_and_reject_lies() {
        let h = RequestHead {
            body_len: 3,
            timeout_us: 99,
            path_len: 2,
            meta_len: 1,
        };
        let mut f = vec![0u8; REQUEST_HEAD_LEN + 2 + 1 + 3];
        h.write(&mut f);
        assert_eq!(RequestHead::read(&f), Ok(h));
        assert!(RequestHead::read(&f[..10]).is_err());
        assert!(RequestHead::read(&f[..REQUEST_HEAD_LEN + 2]).is_err());
        f.push(0); // one body byte more than body_len
        assert!(RequestHead::read(&f).is_err());
        f.pop();
        f[4] = STREAM_FLAG; // streaming: the timeout is unchanged
        assert_eq!(RequestHead::read(&f), Ok(h));
        assert!(request_is_stream(&f));
        f[4] = 0x80; // a flag this side does not know
        assert!(RequestHead::read(&f).is_err());
        assert_eq!(
            RequestHead::timeout_us_of(Some(Duration::MAX)),
            MAX_TIMEOUT_US
        );
        assert_eq!(RequestHead::timeout_us_of(Some(Duration::from_nanos(1))), 1);

        let r = ResponseHead {
            body_len: 0,
            code: 12,
            msg_len: 3,
            meta_len: 0,
        };
        let mut f = vec![0u8; RESPONSE_HEAD_LEN + 3];
        r.write(&mut f);
        assert_eq!(ResponseHead::read(&f), Ok(r));
        assert_eq!(r.code(), Code::Unimplemented);
        f[3] = 2; // an error whose body (its details) is 2 bytes, 1 here
        f.push(9);
        assert_eq!(ResponseHead::read(&f).unwrap().body_len, 2);
        f[5] = 0x01; // a flag this side does not know
        assert!(ResponseHead::read(&f).is_err());
        f[5] = GATHER; // a gather list without BY_REF
        assert!(ResponseHead::read(&f).is_err());
        f[5] = 0;
        f.extend([9, 9]); // 3 body bytes of 2 announced
        assert!(ResponseHead::read(&f).is_err());
    }

    #[test]
    fn a_body_by_reference_is_exactly_a_descriptor_of_the_body() {
        let d = Descriptor {
            addr: 0x7f00_0000_1000,
            rkey: 0xabcd,
            len: 1 << 20,
        };
        let h = RequestHead {
            body_len: d.len,
            timeout_us: 0,
            path_len: 2,
            meta_len: 0,
        };
        let mut f = vec![0u8; REQUEST_HEAD_LEN + 2 + DESCRIPTOR_LEN];
        h.write(&mut f);
        set_request_by_ref(&mut f);
        d.write(&mut f[h.body_start()..]);
        assert!(request_is_by_ref(&f));
        assert_eq!(RequestHead::read(&f), Ok(h));
        assert_eq!(Descriptor::read(&f[h.body_start()..], h.body_len), Ok(d));
        // A descriptor one byte short or long, or of another length, is a lie.
        assert!(RequestHead::read(&f[..f.len() - 1]).is_err());
        f.push(0);
        assert!(RequestHead::read(&f).is_err());
        f.pop();
        f[3] ^= 1; // body_len no longer the descriptor's len
        assert!(RequestHead::read(&f).is_err());
        // Without the flag, 16 body bytes of a 1 MiB body are just a first chunk.
        f[3] ^= 1;
        f[REQ_FLAGS_AT] = 0;
        assert_eq!(RequestHead::read(&f), Ok(h));

        let r = ResponseHead {
            body_len: 0,
            code: 0,
            msg_len: 0,
            meta_len: 0,
        };
        let mut f = vec![0u8; RESPONSE_HEAD_LEN + DESCRIPTOR_LEN];
        r.write(&mut f);
        set_response_by_ref(&mut f);
        Descriptor { len: 0, ..d }.write(&mut f[RESPONSE_HEAD_LEN..]);
        assert!(response_is_by_ref(&f));
        assert!(
            ResponseHead::read(&f).is_err(),
            "an empty body by reference"
        );
        let wrap = Descriptor {
            addr: u64::MAX - 3,
            rkey: 1,
            len: 8,
        };
        assert!(Descriptor::read(
            &{
                let mut b = [0u8; DESCRIPTOR_LEN];
                wrap.write(&mut b);
                b
            },
            8
        )
        .is_err());
    }

    #[test]
    fn a_batch_round_trips_and_a_message_that_does_not_fit_is_left_out() {
        let mut f = vec![0u8; 64];
        let mut b = BatchWriter::new(&mut f);
        assert!(b.push(3, |o| o.copy_from_slice(b"abc")));
        assert!(b.push(0, |_| {}));
        let room = b.room();
        assert!(!b.push(room + 1, |_| unreachable!("not encoded")));
        assert!(b.push(5, |o| o.copy_from_slice(b"12345")));
        let n = b.finish();
        match read_msg(&f[..n]) {
            Ok(MsgFrame::Batch(b)) => {
                assert_eq!(b.count(), 3);
                let got: Vec<&[u8]> = b.messages().collect();
                assert_eq!(got, vec![&b"abc"[..], b"", b"12345"]);
            }
            other => panic!("{other:?}"),
        }
        // One byte more or less than the head says: malformed, never a panic.
        assert!(read_msg(&f[..n - 1]).is_err());
        let mut longer = f[..n].to_vec();
        longer.push(0);
        assert!(read_msg(&longer).is_err());
        // The rendezvous bit without a descriptor.
        let mut c = [0u8; MSG_HEAD_LEN];
        write_msg_head(&mut c, 0, 0);
        c[4] |= 0x80;
        assert!(read_msg(&c).is_err());
    }

    #[test]
    fn a_stream_message_by_reference_is_exactly_a_descriptor_of_it() {
        let d = Descriptor {
            addr: 0x7f00_0000_2000,
            rkey: 77,
            len: 1 << 20,
        };
        let mut f = [0u8; MSG_HEAD_LEN + DESCRIPTOR_LEN];
        assert_eq!(write_msg_by_ref(&mut f, &d), f.len());
        assert_eq!(
            read_msg(&f),
            Ok(MsgFrame::ByRef {
                total: d.len,
                desc: d
            })
        );
        assert_eq!(msg_by_ref(&f), Some(d));
        // A chunk is not by reference, and is not parsed as one.
        let mut c = [0u8; MSG_HEAD_LEN + 3];
        write_msg_head(&mut c, 0, 3);
        assert_eq!(msg_by_ref(&c), None);
        // Lies: one byte short or long, another length, an offset, a batch.
        assert!(read_msg(&f[..f.len() - 1]).is_err());
        let mut longer = f.to_vec();
        longer.push(0);
        assert!(read_msg(&longer).is_err());
        let mut g = f;
        g[7] ^= 1;
        assert!(read_msg(&g).is_err(), "total differs from the descriptor");
        let mut g = f;
        g[3] = 1;
        assert!(read_msg(&g).is_err(), "an offset");
        let mut g = f;
        g[4] |= 0x40;
        assert!(read_msg(&g).is_err(), "a batch");
        let mut e = [0u8; MSG_HEAD_LEN + DESCRIPTOR_LEN];
        write_msg_by_ref(&mut e, &d);
        e[MSG_HEAD_LEN + 12..].fill(0);
        e[4..8].copy_from_slice(&MSG_RENDEZVOUS.to_be_bytes());
        assert!(read_msg(&e).is_err(), "an empty message by reference");
        // The release names the address, exactly 8 bytes.
        let mut r = [0u8; RDONE_MSG_LEN];
        write_rdone(&mut r, d.addr);
        assert_eq!(read_rdone(&r), Ok(d.addr));
        assert!(read_rdone(&r[..7]).is_err());
        assert!(read_rdone(&[0u8; 9]).is_err());
    }
}
