//! The call codec: what a call's first frame carries each way, written once for RC
//! ([`ClientConn`](super::ClientConn), [`ServerConn`](super::ServerConn)) and UD
//! ([`UdClient`](super::ud::UdClient), [`UdServer`](super::ud::UdServer)).
//!
//! * A request: [`write_request`] writes the `REQ` head, path and metadata of a
//!   [`CallHead`]; the caller encodes the body right after them, straight into the
//!   send slot (no copy), or, when it needs fragments, from memory of its own.
//!   [`read_request`] reads one back.
//! * A response: [`write_response`] writes an OK head and the response metadata (the
//!   caller encodes the body after them, as for a request); [`write_status`] writes a
//!   final status: code, message, metadata and, as the body, its details.
//!   [`read_response`] reads the first frame of either, and [`Outcome::finish`] turns
//!   the whole body, once in, into the call's result.
//!
//! The layouts are [`wire`](super::wire)'s; this module decides what goes in them.
//!
//! # Fitting a status into its first frame
//!
//! `room` is the first frame's bytes after the `RESP` head. In this order:
//!
//! 1. The code is never changed.
//! 2. The message is promised its first [`MESSAGE_FLOOR`] bytes (cut back to a char
//!    boundary), or `room` if less.
//! 3. The metadata goes whole if it is within [`DEFAULT_METADATA_LIMIT`] and fits
//!    beside that promise; otherwise the status goes without it (dropped whole,
//!    counted in [`StatusCuts::metadata_dropped`], logged with `warn!`).
//! 4. The details go whole in the first frame if they fit beside the promised message
//!    and the metadata. Otherwise, where the transport has fragments (RC), they go as
//!    a body pulled in fragments if no longer than the limit it passes (the max
//!    message, within what the connection's buffer cap leaves); else the status goes
//!    without them (dropped whole, counted in [`StatusCuts::details_dropped`], logged
//!    with `warn!`). Details are opaque: half of them would be worse than none.
//! 5. The message takes the room left (beside details that go whole in the frame), at
//!    most 65,535 bytes, cut back to a char boundary; a cut counts in
//!    [`StatusCuts::messages_cut`].
//! 6. Details that go in fragments fill what the message and metadata leave of the
//!    first frame; the rest is pulled.
//!
//! So a status with small details stays one frame each way, and only a frame too
//! small for the status's metadata or an oversized status loses anything.

use std::ops::Range;
use std::time::Duration;

use bytes::Bytes;

use crate::code::Code;
use crate::engine::gather::Gather;
use crate::engine::wire::{
    self, Descriptor, RequestHead, ResponseHead, REQUEST_HEAD_LEN, RESPONSE_HEAD_LEN,
};
use crate::metadata::{MetadataMap, DEFAULT_METADATA_LIMIT};
use crate::status::Status;

/// Bytes of a status message kept before its metadata and details are considered
/// (step 2 of the module's rule): enough for the gist of any message.
pub const MESSAGE_FLOOR: usize = 128;

/// What a call says before its body: the `REQ` frame's path, metadata and timeout.
#[derive(Debug, Clone, Copy)]
pub struct CallHead<'a> {
    /// The method's path, `/package.Service/Method`.
    pub path: &'a str,
    /// Request metadata.
    pub metadata: &'a MetadataMap,
    /// Time the call may take (from its start; `None`: no deadline).
    pub timeout: Option<Duration>,
}

impl<'a> CallHead<'a> {
    /// A head for `path` with `metadata` and `timeout`.
    pub fn new(path: &'a str, metadata: &'a MetadataMap, timeout: Option<Duration>) -> Self {
        CallHead {
            path,
            metadata,
            timeout,
        }
    }

    /// Bytes [`write_request`] writes before the body.
    pub fn encoded_len(&self) -> usize {
        REQUEST_HEAD_LEN + self.path.len() + self.metadata.encoded_len()
    }
}

/// Writes the `REQ` head, path and metadata of a call whose body is `body_len` bytes
/// at the start of `out`; returns where the body starts (the caller writes it there,
/// or its first chunk). `RESOURCE_EXHAUSTED` when the metadata is over its limit or
/// the head does not fit `out`; then nothing is to be sent.
pub fn write_request(
    head: &CallHead<'_>,
    body_len: usize,
    out: &mut [u8],
) -> Result<usize, Status> {
    let meta_len = head.metadata.encoded_len();
    if meta_len > DEFAULT_METADATA_LIMIT {
        return Err(Status::resource_exhausted(format!(
            "request metadata of {meta_len} bytes exceeds the limit of {DEFAULT_METADATA_LIMIT}"
        )));
    }
    let path = head.path.as_bytes();
    let len = REQUEST_HEAD_LEN + path.len() + meta_len;
    if path.len() > usize::from(u16::MAX) || len > out.len() {
        return Err(Status::resource_exhausted(format!(
            "path and metadata ({len} bytes) do not fit a {}-byte frame",
            out.len()
        )));
    }
    let body_len = u32::try_from(body_len).map_err(|_| {
        Status::resource_exhausted(format!(
            "request message of {body_len} bytes exceeds the wire's limit of {} bytes",
            u32::MAX
        ))
    })?;
    RequestHead {
        body_len,
        timeout_us: RequestHead::timeout_us_of(head.timeout),
        path_len: path.len() as u16,
        meta_len: meta_len as u16,
    }
    .write(out);
    let meta_at = REQUEST_HEAD_LEN + path.len();
    out[REQUEST_HEAD_LEN..meta_at].copy_from_slice(path);
    head.metadata.encode(&mut &mut out[meta_at..len]);
    Ok(len)
}

/// A request's first frame, read.
#[derive(Debug)]
pub struct RequestStart {
    /// The path's bytes in the frame (not yet checked to be UTF-8).
    pub path: Range<usize>,
    /// Request metadata.
    pub metadata: MetadataMap,
    /// Time left for the call, as the client sent it.
    pub timeout: Option<Duration>,
    /// The body's bytes in this frame (all of it, or its first chunk).
    pub body: Range<usize>,
    /// The body's length across all fragments.
    pub body_len: usize,
    /// The body is by reference: where it lies (`body` then holds the descriptor),
    /// or for a gather list its first reference with the body's length.
    pub by_ref: Option<Descriptor>,
    /// The body is a gather list (`by_ref` then summarises it).
    pub gather: Option<Gather>,
}

/// Reads a request's first frame: a malformed head is `INTERNAL`, unreadable metadata
/// the status [`MetadataMap::decode`] gives.
pub fn read_request(frame: &[u8]) -> Result<RequestStart, Status> {
    let head = RequestHead::read(frame)
        .map_err(|m| Status::internal(format!("malformed request: {}", m.0)))?;
    let metadata = MetadataMap::decode(&frame[head.meta()], DEFAULT_METADATA_LIMIT)?;
    let (by_ref, gather) = by_ref(
        wire::request_is_by_ref(frame),
        wire::request_is_gather(frame),
        &frame[head.body_start()..],
        head.body_len,
    );
    Ok(RequestStart {
        path: head.path(),
        metadata,
        timeout: head.timeout(),
        body: head.body_start()..frame.len(),
        body_len: head.body_len as usize,
        by_ref,
        gather,
    })
}

/// The descriptor, or the gather list and its summary, of a body by reference
/// whose head its `read` already checked (and accepted).
fn by_ref(
    by_ref: bool,
    gather: bool,
    rest: &[u8],
    body_len: u32,
) -> (Option<Descriptor>, Option<Gather>) {
    if gather {
        let g = Gather::read(rest, body_len).ok();
        return (g.as_ref().map(Gather::summary), g);
    }
    let d = by_ref.then(|| Descriptor::read(rest, body_len).ok());
    (d.flatten(), None)
}

/// Writes an OK `RESP` head and the response `metadata` for a body of `body_len`
/// bytes at the start of `out`; returns where the body starts. `RESOURCE_EXHAUSTED`
/// when the metadata is over its limit or does not fit `out` (nothing is written
/// that the caller should send; it answers with that status instead).
pub fn write_response(
    metadata: &MetadataMap,
    body_len: usize,
    out: &mut [u8],
) -> Result<usize, Status> {
    let meta_len = metadata.encoded_len();
    let len = RESPONSE_HEAD_LEN + meta_len;
    if meta_len > DEFAULT_METADATA_LIMIT || len > out.len() {
        return Err(Status::resource_exhausted(format!(
            "response metadata of {meta_len} bytes does not fit a frame"
        )));
    }
    let body_len = u32::try_from(body_len).map_err(|_| {
        Status::resource_exhausted(format!(
            "response message of {body_len} bytes exceeds the wire's limit of {} bytes",
            u32::MAX
        ))
    })?;
    ResponseHead {
        body_len,
        code: 0,
        msg_len: 0,
        meta_len: meta_len as u16,
    }
    .write(out);
    metadata.encode(&mut &mut out[RESPONSE_HEAD_LEN..len]);
    Ok(len)
}

/// Counts of what fitting statuses into frames cut or dropped (the module's rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCuts {
    /// Status messages sent cut short.
    pub messages_cut: u64,
    /// Statuses sent without their metadata.
    pub metadata_dropped: u64,
    /// Statuses sent (or, for a client, delivered) without their details.
    pub details_dropped: u64,
}

/// What [`write_status`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusFrame {
    /// Bytes written at the head of `out`.
    pub len: usize,
    /// The body length the head announces: the details' length, 0 if dropped.
    pub details_len: usize,
    /// Details bytes in this frame; fragments carry the rest from this offset.
    pub details_sent: usize,
}

/// Writes a final status (code, message, metadata, details) at the start of `out`,
/// fitted by the module's rule. `fragments`: the longest details the transport can
/// send beyond the first frame (RC), or `None` (UD, and answers of a call nobody
/// will pull). `out` must hold at least the `RESP` head.
pub fn write_status(
    s: &Status,
    fragments: Option<usize>,
    out: &mut [u8],
    cuts: &mut StatusCuts,
) -> StatusFrame {
    let room = out.len() - RESPONSE_HEAD_LEN;
    let message = s.message();
    let floor = cut(message, MESSAGE_FLOOR.min(room)).len();

    let metadata = s.metadata();
    let mut meta_len = metadata.encoded_len();
    if meta_len > DEFAULT_METADATA_LIMIT || meta_len > room - floor {
        cuts.metadata_dropped += 1;
        tracing::warn!(
            code = ?s.code(),
            metadata_bytes = meta_len,
            frame_bytes = out.len(),
            "status metadata does not fit the status's frame; sent without it"
        );
        meta_len = 0;
    }

    let details = s.details();
    let left = room - floor - meta_len;
    let (details_len, whole_in_frame) = if details.len() <= left {
        (details.len(), details.len())
    } else if fragments.is_some_and(|max| details.len() <= max.min(u32::MAX as usize)) {
        (details.len(), 0)
    } else {
        cuts.details_dropped += 1;
        tracing::warn!(
            code = ?s.code(),
            details_bytes = details.len(),
            limit = fragments.unwrap_or(left),
            "status details exceed what can be sent; sent without them"
        );
        (0, 0)
    };

    let msg_room = (room - meta_len - whole_in_frame).min(usize::from(u16::MAX));
    let msg = cut(message, msg_room).as_bytes();
    if msg.len() < message.len() {
        cuts.messages_cut += 1;
    }

    let meta_at = RESPONSE_HEAD_LEN + msg.len();
    let body_at = meta_at + meta_len;
    let details_sent = details_len.min(out.len() - body_at);
    ResponseHead {
        body_len: details_len as u32,
        code: s.code() as u8,
        msg_len: msg.len() as u16,
        meta_len: meta_len as u16,
    }
    .write(out);
    out[RESPONSE_HEAD_LEN..meta_at].copy_from_slice(msg);
    if meta_len > 0 {
        metadata.encode(&mut &mut out[meta_at..body_at]);
    }
    out[body_at..body_at + details_sent].copy_from_slice(&details[..details_sent]);
    StatusFrame {
        len: body_at + details_sent,
        details_len,
        details_sent,
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends at a char boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What a response's first frame says besides its body.
#[derive(Debug)]
pub enum Outcome {
    /// OK, with the response metadata: the body is the response message.
    Ok(MetadataMap),
    /// A final status (code, message, metadata): the body is its details.
    Status(Status),
}

impl Outcome {
    /// The call's result once its whole `body` is in: the response's metadata and
    /// body, or the status carrying the body as its details (`details` turns the body
    /// into bytes of their own).
    pub fn finish<B>(
        self,
        body: B,
        details: impl FnOnce(B) -> Bytes,
    ) -> Result<(MetadataMap, B), Status> {
        match self {
            Outcome::Ok(metadata) => Ok((metadata, body)),
            Outcome::Status(mut s) => {
                let d = details(body);
                if !d.is_empty() {
                    s.set_details(d);
                }
                Err(s)
            }
        }
    }
}

/// A response's first frame, read.
#[derive(Debug)]
pub struct ResponseStart {
    /// OK with metadata, or a status.
    pub outcome: Outcome,
    /// The body's bytes in this frame (all of it, or its first chunk).
    pub body: Range<usize>,
    /// The body's length across all fragments.
    pub body_len: usize,
    /// The body is by reference: where it lies (`body` then holds the descriptor),
    /// or for a gather list its first reference with the body's length.
    pub by_ref: Option<Descriptor>,
    /// The body is a gather list (`by_ref` then summarises it).
    pub gather: Option<Gather>,
}

/// Reads a response's first frame: a malformed head is `INTERNAL`, unreadable
/// metadata the status [`MetadataMap::decode`] gives. A status message that is not
/// UTF-8 is read lossily (the peer's text, shown as well as it can be).
pub fn read_response(frame: &[u8]) -> Result<ResponseStart, Status> {
    let head = ResponseHead::read(frame)
        .map_err(|m| Status::internal(format!("malformed response: {}", m.0)))?;
    let metadata = MetadataMap::decode(&frame[head.meta()], DEFAULT_METADATA_LIMIT)?;
    let outcome = match head.code() {
        Code::Ok => Outcome::Ok(metadata),
        code => {
            let msg = String::from_utf8_lossy(&frame[head.msg()]).into_owned();
            let mut s = Status::new(code, msg);
            *s.metadata_mut() = metadata;
            Outcome::Status(s)
        }
    };
    let (by_ref, gather) = by_ref(
        wire::response_is_by_ref(frame),
        wire::response_is_gather(frame),
        &frame[head.body_start()..],
        head.body_len,
    );
    Ok(ResponseStart {
        outcome,
        body: head.body_start()..frame.len(),
        body_len: head.body_len as usize,
        by_ref,
        gather,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::EncodeMessage;

    fn status(msg: &str, meta: usize, details: usize) -> Status {
        let mut s = Status::with_details(Code::NotFound, msg, Bytes::from(vec![7u8; details]));
        if meta > 0 {
            // One entry: 2 (count) + 1 + key + 2 + value.
            let v = "v".repeat(meta - 2 - 1 - 3 - 2);
            s.metadata_mut().insert("key", v.parse().unwrap());
            assert_eq!(s.metadata().encoded_len(), meta);
        }
        s
    }

    /// Writes `s` into a frame of `frame` bytes and reads it back (the whole
    /// details, with any fragment's share appended as a peer would pull it).
    fn round_trip(
        s: &Status,
        frame: usize,
        fragments: Option<usize>,
    ) -> (Status, StatusFrame, StatusCuts) {
        let mut out = vec![0u8; frame];
        let mut cuts = StatusCuts::default();
        let f = write_status(s, fragments, &mut out, &mut cuts);
        let start = read_response(&out[..f.len]).unwrap();
        assert_eq!(start.body_len, f.details_len);
        assert_eq!(start.body.len(), f.details_sent);
        let mut body = out[start.body].to_vec();
        body.extend_from_slice(&s.details()[f.details_sent..f.details_len]);
        let got = start.outcome.finish(body, Bytes::from).unwrap_err();
        (got, f, cuts)
    }

    #[test]
    fn a_status_that_fits_travels_whole_in_one_frame() {
        let s = status("not here", 40, 100);
        let (got, f, cuts) = round_trip(&s, 512, None);
        assert_eq!(got.code(), Code::NotFound);
        assert_eq!(got.message(), "not here");
        assert_eq!(got.metadata(), s.metadata());
        assert_eq!(got.details(), s.details());
        assert_eq!(f.details_sent, 100);
        assert_eq!(cuts, StatusCuts::default());
    }

    #[test]
    fn the_message_is_cut_at_a_char_boundary_and_the_code_never_changes() {
        // 300 two-byte chars into a 256-byte frame: 246 bytes of room, 123 chars.
        let s = Status::new(Code::Aborted, "é".repeat(300));
        let (got, _, cuts) = round_trip(&s, 256, None);
        assert_eq!(got.code(), Code::Aborted);
        assert_eq!(got.message(), "é".repeat(123));
        assert_eq!(cuts.messages_cut, 1);
    }

    #[test]
    fn metadata_yields_only_to_the_message_floor() {
        // Room 246: a 100-byte message and 118 bytes of metadata both fit.
        let s = status(&"m".repeat(100), 118, 0);
        let (got, _, cuts) = round_trip(&s, 256, None);
        assert_eq!((got.message().len(), got.metadata().len()), (100, 1));
        assert_eq!(cuts, StatusCuts::default());
        // A long message is cut to make room for the metadata...
        let s = status(&"m".repeat(1000), 118, 0);
        let (got, _, cuts) = round_trip(&s, 256, None);
        assert_eq!(got.message().len(), 246 - 118);
        assert_eq!(got.metadata(), s.metadata());
        assert_eq!((cuts.messages_cut, cuts.metadata_dropped), (1, 0));
        // ...but not below the floor: metadata that does not fit beside it goes.
        let s = status(&"m".repeat(1000), 119, 0);
        let (got, _, cuts) = round_trip(&s, 256, None);
        assert_eq!(got.message().len(), 246);
        assert!(got.metadata().is_empty());
        assert_eq!((cuts.messages_cut, cuts.metadata_dropped), (1, 1));
        // A short message leaves its unused floor to the metadata.
        let s = status("short", 200, 0);
        let (got, _, cuts) = round_trip(&s, 256, None);
        assert_eq!((got.message(), got.metadata().len()), ("short", 1));
        assert_eq!(cuts, StatusCuts::default());
    }

    #[test]
    fn details_go_whole_in_the_frame_in_fragments_or_not_at_all() {
        // Small details fit beside the floor: the long message yields to them.
        let s = status(&"m".repeat(1000), 0, 100);
        let (got, f, cuts) = round_trip(&s, 256, None);
        assert_eq!(got.details(), s.details());
        assert_eq!(got.message().len(), 246 - 100);
        assert_eq!(f.details_sent, 100);
        assert_eq!(cuts.details_dropped, 0);
        // Larger details: without fragments (UD) they are dropped whole...
        let s = status(&"m".repeat(1000), 0, 200);
        let (got, f, cuts) = round_trip(&s, 256, None);
        assert!(got.details().is_empty());
        assert_eq!((f.details_len, got.message().len()), (0, 246));
        assert_eq!(cuts.details_dropped, 1);
        // ...with fragments (RC) they follow the message, the rest pulled...
        let s = status("short", 0, 5000);
        let (got, f, cuts) = round_trip(&s, 256, Some(8000));
        assert_eq!(got.details(), s.details());
        assert_eq!(f.details_sent, 246 - 5);
        assert_eq!(cuts, StatusCuts::default());
        // ...unless over the transport's limit.
        let (got, f, cuts) = round_trip(&s, 256, Some(4999));
        assert!(got.details().is_empty());
        assert_eq!((f.details_len, got.message()), (0, "short"));
        assert_eq!(cuts.details_dropped, 1);
    }

    #[test]
    fn a_request_head_round_trips_and_leaves_the_body_to_the_caller() {
        let mut md = MetadataMap::new();
        md.insert("k", "v".parse().unwrap());
        let head = CallHead::new("/a.B/C", &md, Some(Duration::from_millis(5)));
        let mut out = vec![0u8; 256];
        let at = write_request(&head, 3, &mut out).unwrap();
        assert_eq!(at, head.encoded_len());
        out[at..at + 3].copy_from_slice(b"abc");
        let r = read_request(&out[..at + 3]).unwrap();
        assert_eq!(&out[r.path.clone()], b"/a.B/C");
        assert_eq!(r.metadata, md);
        assert_eq!(r.timeout, Some(Duration::from_millis(5)));
        assert_eq!((&out[r.body.clone()], r.body_len), (&b"abc"[..], 3));
        let e = write_request(&head, 3, &mut out[..20]).unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted);
    }

    #[test]
    fn an_ok_response_round_trips_with_its_metadata() {
        let mut md = MetadataMap::new();
        md.insert("k", "v".parse().unwrap());
        let mut out = vec![0u8; 256];
        let body = b"xyz".to_vec();
        let at = write_response(&md, body.encoded_len(), &mut out).unwrap();
        out[at..at + 3].copy_from_slice(&body);
        let r = read_response(&out[..at + 3]).unwrap();
        let (got_md, range) = r.outcome.finish(r.body, |_| Bytes::new()).unwrap();
        assert_eq!((got_md, &out[range]), (md, &b"xyz"[..]));
    }
}
