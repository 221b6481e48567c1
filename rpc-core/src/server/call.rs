//! `ServerCall`: one received call, still undecoded in its receive slot.

use std::ops::Range;
use std::time::Duration;

use prost::Message;

use crate::metadata::MetadataMap;
use crate::payload::Payload;
use crate::request::Request;
use crate::status::Status;

/// A call as the server received it. The path and the message are read straight
/// from the received bytes; decoding releases them.
#[derive(Debug)]
pub struct ServerCall {
    payload: Payload,
    path: Range<usize>,
    body: Range<usize>,
    metadata: MetadataMap,
    timeout: Option<Duration>,
}

impl ServerCall {
    /// A call whose path and message body are the given ranges of `payload`.
    /// A path that is not `/service/method` in UTF-8 is `INTERNAL` (malformed frame).
    pub fn from_parts(
        payload: Payload,
        path: Range<usize>,
        body: Range<usize>,
        metadata: MetadataMap,
        timeout: Option<Duration>,
    ) -> Result<ServerCall, Status> {
        let bytes = payload.as_slice();
        let p = bytes
            .get(path.clone())
            .ok_or_else(|| Status::internal("call path outside the frame"))?;
        if bytes.get(body.clone()).is_none() {
            return Err(Status::internal("call body outside the frame"));
        }
        let p = std::str::from_utf8(p).map_err(|_| Status::internal("call path is not UTF-8"))?;
        if !p.starts_with('/') || p[1..].split('/').count() != 2 {
            return Err(Status::internal(format!(
                "call path {p:?} is not /service/method"
            )));
        }
        Ok(ServerCall {
            payload,
            path,
            body,
            metadata,
            timeout,
        })
    }

    /// `/package.Service/Method`.
    pub fn path(&self) -> &str {
        std::str::from_utf8(&self.payload.as_slice()[self.path.clone()])
            .expect("validated in from_parts")
    }

    /// `package.Service`.
    pub fn service(&self) -> &str {
        let p = self.path();
        &p[1..p.rfind('/').expect("validated")]
    }

    /// `Method`.
    pub fn method(&self) -> &str {
        let p = self.path();
        &p[p.rfind('/').expect("validated") + 1..]
    }

    /// Request metadata.
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// Time left for the call when it arrived.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Decodes the request message; a body that does not decode is
    /// `INVALID_ARGUMENT` (the caller sent something that is not this method's input).
    pub fn into_request<M: Message + Default>(self) -> Result<Request<M>, Status> {
        let message = self.payload.decode(self.body.clone()).map_err(|e| {
            Status::invalid_argument(format!("failed to decode request message: {e}"))
        })?;
        let mut req = Request::from_parts(self.metadata, message);
        if let Some(t) = self.timeout {
            req.set_timeout(t);
        }
        Ok(req)
    }

    /// Length in bytes of the encoded request message (for size limits, before
    /// decoding).
    pub fn message_len(&self) -> usize {
        self.body.len()
    }
}
