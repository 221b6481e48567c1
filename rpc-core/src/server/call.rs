//! `ServerCall`: one received call, still undecoded in its receive slot.

use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use prost::Message;

use crate::metadata::MetadataMap;
use crate::payload::Payload;
use crate::request::{ConnAddrs, Request};
use crate::status::Status;
use crate::stream::BoxInbound;
use crate::Extensions;

/// A call as the server received it. The path and the message are read straight
/// from the received bytes; decoding releases them. Interceptors and layers may
/// change its metadata and add extensions, which the handler's [`Request`] carries.
#[derive(Debug)]
pub struct ServerCall {
    payload: Payload,
    path: Span,
    /// Where in the path the method's `/` is (after the service's name).
    method_at: u32,
    body: Span,
    metadata: MetadataMap,
    timeout: Option<Duration>,
    extensions: Extensions,
    addrs: ConnAddrs,
    /// The client's messages, for a call of a client-streaming or bidirectional
    /// method (its body is then empty).
    inbound: Option<BoxInbound>,
}

impl ServerCall {
    /// Length in bytes of the encoded request message (for size limits, before
    /// decoding).
    pub fn message_len(&self) -> usize {
        self.body.len as usize
    }

    /// A call whose path and message body are the given ranges of `payload`.
    /// A path that is not `/service/method` in UTF-8 is `INTERNAL` (malformed frame).
    pub fn from_parts(
        payload: Payload,
        path: Range<usize>,
        body: Range<usize>,
        metadata: MetadataMap,
        timeout: Option<Duration>,
    ) -> Result<ServerCall, Status> {
        Self::received(payload, path, body, metadata, timeout, ConnAddrs::default())
    }

    /// [`ServerCall::from_parts`] of a call that came over the connection whose ends
    /// are `addrs`.
    pub(crate) fn received(
        payload: Payload,
        path: Range<usize>,
        body: Range<usize>,
        mut metadata: MetadataMap,
        timeout: Option<Duration>,
        addrs: ConnAddrs,
    ) -> Result<ServerCall, Status> {
        if let Some(t) = timeout {
            // Where a tonic handler reads its deadline (the frame carried it).
            crate::grpc_timeout::insert(&mut metadata, t);
        }
        let bytes = payload.as_slice();
        let p = bytes
            .get(path.clone())
            .ok_or_else(|| Status::internal("call path outside the frame"))?;
        if bytes.get(body.clone()).is_none() {
            return Err(Status::internal("call body outside the frame"));
        }
        let (Some(path_span), Some(body)) = (Span::of(&path), Span::of(&body)) else {
            return Err(Status::internal("call path or body beyond 4 GiB"));
        };
        let p = std::str::from_utf8(p).map_err(|_| Status::internal("call path is not UTF-8"))?;
        let Some(method_at) = method_slash(p) else {
            return Err(Status::internal(format!(
                "call path {p:?} is not /service/method"
            )));
        };
        Ok(ServerCall {
            payload,
            path: path_span,
            // Below the path's length, itself below 4 GiB (`Span::of`).
            method_at: method_at as u32,
            body,
            metadata,
            timeout,
            extensions: Extensions::new(),
            addrs,
            inbound: None,
        })
    }

    /// This call as a streaming call whose request messages arrive on `inbound`.
    #[must_use]
    pub fn with_inbound(mut self, inbound: BoxInbound) -> ServerCall {
        self.inbound = Some(inbound);
        self
    }

    /// Whether the client streams its messages (see [`ServerCall::take_inbound`]).
    pub fn is_streaming(&self) -> bool {
        self.inbound.is_some()
    }

    /// The client's messages of a streaming call (once; `None` for a unary call).
    pub fn take_inbound(&mut self) -> Option<BoxInbound> {
        self.inbound.take()
    }

    /// `/package.Service/Method`.
    pub fn path(&self) -> &str {
        std::str::from_utf8(&self.payload.as_slice()[self.path.range()])
            .expect("validated in from_parts")
    }

    /// `package.Service`.
    pub fn service(&self) -> &str {
        &self.path()[1..self.method_at as usize]
    }

    /// `package.Service` as bytes, without the UTF-8 check [`ServerCall::service`]
    /// repeats (the path was checked when the call arrived): what the server routes
    /// on, once per call.
    pub(crate) fn service_bytes(&self) -> &[u8] {
        let start = self.path.start as usize;
        &self.payload.as_slice()[start + 1..start + self.method_at as usize]
    }

    /// `Method`.
    pub fn method(&self) -> &str {
        &self.path()[self.method_at as usize + 1..]
    }

    /// Request metadata.
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// Request metadata, mutably (what the handler's request will carry).
    pub fn metadata_mut(&mut self) -> &mut MetadataMap {
        &mut self.metadata
    }

    /// Time left for the call when it arrived.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Values attached to the call on the server (by an interceptor or a layer);
    /// the handler's request carries them.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The extensions, mutably.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }

    /// The client's address as the server sees it: the remote end of the handshake's
    /// TCP connection (see [`Request::remote_addr`]).
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.addrs.remote()
    }

    /// The server's end of the handshake's TCP connection.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.addrs.local()
    }

    /// Everything but the message, as a request for an interceptor; the call keeps
    /// empty metadata and extensions until [`ServerCall::restore_head`].
    pub(crate) fn take_head(&mut self) -> Request<()> {
        Request::received(
            std::mem::take(&mut self.metadata),
            std::mem::take(&mut self.extensions),
            (),
            self.timeout,
            self.addrs.clone(),
        )
    }

    /// Takes back what an interceptor returned: its metadata and extensions (the
    /// timeout was armed when the call arrived; the addresses are the connection's).
    pub(crate) fn restore_head(&mut self, head: Request<()>) {
        let (metadata, extensions, (), _, _) = head.into_all();
        self.metadata = metadata;
        self.extensions = extensions;
    }

    /// Decodes the request message; a body that does not decode is
    /// `INVALID_ARGUMENT` (the caller sent something that is not this method's input).
    pub fn into_request<M: Message + Default>(self) -> Result<Request<M>, Status> {
        let message = self.payload.decode(self.body.range()).map_err(|e| {
            Status::invalid_argument(format!("failed to decode request message: {e}"))
        })?;
        Ok(Request::received(
            self.metadata,
            self.extensions,
            message,
            self.timeout,
            self.addrs,
        ))
    }
}

/// Where the second `/` of `p` is, if `p` is `/service/method`: a `/`, then
/// exactly one more.
fn method_slash(p: &str) -> Option<usize> {
    let rest = p.as_bytes().strip_prefix(b"/")?;
    let at = rest.iter().position(|&b| b == b'/')?;
    (!rest[at + 1..].contains(&b'/')).then_some(at + 1)
}

/// Whether `p` is `/service/method`.
#[cfg(test)]
fn is_service_method(p: &str) -> bool {
    method_slash(p).is_some()
}

/// A range of a call's bytes in half the room of a `Range<usize>`: a call is moved
/// through several futures on its way to the handler, and every byte of it is
/// copied each time. The wire bounds a body to `u32::MAX` bytes, and what comes
/// before it (head, path, metadata) to less than 128 KiB.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
}

impl Span {
    fn of(r: &Range<usize>) -> Option<Span> {
        Some(Span {
            start: u32::try_from(r.start).ok()?,
            len: u32::try_from(r.len()).ok()?,
        })
    }

    fn range(self) -> Range<usize> {
        let start = self.start as usize;
        start..start + self.len as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_slash_service_slash_method() {
        assert!(is_service_method("/pkg.S/M"));
        for bad in ["", "/", "pkg.S/M", "/pkg.S", "/pkg.S/M/x"] {
            assert!(!is_service_method(bad), "{bad:?}");
        }
        let call = |p: &str| {
            let n = p.len();
            ServerCall::from_parts(
                Payload::from_vec(p.as_bytes().to_vec()),
                0..n,
                n..n,
                MetadataMap::new(),
                None,
            )
        };
        let c = call("/pkg.S/M").unwrap();
        assert_eq!(
            (c.path(), c.service(), c.method()),
            ("/pkg.S/M", "pkg.S", "M")
        );
        assert_eq!(c.service_bytes(), b"pkg.S");
        assert!(call("/pkg.S").is_err());
        assert!(call("/pkg.S/M/x").is_err());
    }
}
