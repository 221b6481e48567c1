//! `Request`: a message with its metadata and extensions, as tonic's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::metadata::MetadataMap;
use crate::Extensions;

/// A request: the message plus metadata, extensions and an optional timeout; on the
/// server, also the addresses of the connection it came over.
#[derive(Debug, Clone, Default)]
pub struct Request<T> {
    metadata: MetadataMap,
    message: T,
    extensions: Extensions,
    timeout: Option<Duration>,
    addrs: ConnAddrs,
}

/// The two ends of the connection a call came over, as the server sees them: the
/// handshake's TCP connection (for an RC connection and a UD session alike). Taken
/// once per connection and shared by its calls: a pointer, so that a call and its
/// request grow by one word, not by two socket addresses (which made every move of
/// them, and the future of every call, measurably dearer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ConnAddrs(Option<Arc<Ends>>);

#[derive(Debug, PartialEq, Eq)]
struct Ends {
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
}

impl ConnAddrs {
    /// The ends of the TCP connection `tcp` (an end it cannot tell is `None`).
    pub(crate) fn of(tcp: &tokio::net::TcpStream) -> ConnAddrs {
        Self::new(tcp.local_addr().ok(), tcp.peer_addr().ok())
    }

    pub(crate) fn new(local: Option<SocketAddr>, remote: Option<SocketAddr>) -> ConnAddrs {
        ConnAddrs(Some(Arc::new(Ends { local, remote })))
    }

    pub(crate) fn local(&self) -> Option<SocketAddr> {
        self.0.as_ref().and_then(|e| e.local)
    }

    pub(crate) fn remote(&self) -> Option<SocketAddr> {
        self.0.as_ref().and_then(|e| e.remote)
    }
}

impl<T> Request<T> {
    /// Wraps a message.
    pub fn new(message: T) -> Self {
        Request {
            metadata: MetadataMap::new(),
            message,
            extensions: Extensions::new(),
            timeout: None,
            addrs: ConnAddrs::default(),
        }
    }

    /// The message.
    pub fn get_ref(&self) -> &T {
        &self.message
    }

    /// The message, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.message
    }

    /// The metadata.
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// The metadata, mutably.
    pub fn metadata_mut(&mut self) -> &mut MetadataMap {
        &mut self.metadata
    }

    /// Values of any type attached to the request, which never travel: on the server,
    /// what an interceptor or a layer put there for the handler; on the client, what
    /// an interceptor or a layer of the channel's stack reads.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The extensions, mutably.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }

    /// On the server, the client's address as the server sees it: the remote end of
    /// the TCP connection of the handshake (for an RC connection and a UD session
    /// alike). `None` on a request the client built, or one rebuilt by
    /// [`Request::from_parts`].
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.addrs.remote()
    }

    /// On the server, the server's own end of that TCP connection; `None` where
    /// [`Request::remote_addr`] is.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.addrs.local()
    }

    /// Consumes the request, returning the message.
    pub fn into_inner(self) -> T {
        self.message
    }

    /// Splits into metadata, extensions and message (tonic's order). The timeout and
    /// the connection's addresses are not among the parts.
    pub fn into_parts(self) -> (MetadataMap, Extensions, T) {
        (self.metadata, self.extensions, self.message)
    }

    /// Builds a request from metadata, extensions and a message (tonic's order), with
    /// no timeout and no connection addresses.
    pub fn from_parts(metadata: MetadataMap, extensions: Extensions, message: T) -> Self {
        Request {
            metadata,
            message,
            extensions,
            timeout: None,
            addrs: ConnAddrs::default(),
        }
    }

    /// Sets how long the call may take: the client fails it with `DEADLINE_EXCEEDED`
    /// when it passes, and the deadline travels to the server. As tonic's, it is
    /// also the `grpc-timeout` metadata entry (e.g. `100000u` for 100 ms), which the
    /// server's handler finds in its request's metadata.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
        crate::grpc_timeout::insert(&mut self.metadata, timeout);
    }

    /// The deadline a client's call takes from this request: [`Request::set_timeout`]'s,
    /// else a `grpc-timeout` entry put in its metadata otherwise (as tonic reads it).
    pub(crate) fn call_timeout(&self) -> Option<Duration> {
        self.timeout.or_else(|| {
            let v = self.metadata.get(crate::grpc_timeout::KEY)?;
            crate::grpc_timeout::decode(v.to_str().ok()?)
        })
    }

    /// The timeout set by [`Request::set_timeout`] (on the server: the time left
    /// when the call arrived).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Makes the call wait for the channel to connect, until its deadline, instead
    /// of failing fast `UNAVAILABLE` while the channel cannot connect: gRPC's
    /// *wait-for-ready* (grpc-go's `WaitForReady(true)`, grpc-java's
    /// `withWaitForReady()`; tonic has none). Off by default, as in gRPC. The
    /// deadline is the smaller of [`Request::set_timeout`] and the channel's
    /// `Endpoint::timeout`; with neither, the call waits as long as it takes. A
    /// deadline that passes while waiting ends the call `DEADLINE_EXCEEDED`.
    ///
    /// It is the [`WaitForReady`] extension: a client interceptor or layer may set
    /// it too.
    pub fn set_wait_for_ready(&mut self, wait: bool) {
        if wait {
            self.extensions.insert(WaitForReady);
        } else {
            self.extensions.remove::<WaitForReady>();
        }
    }

    /// Whether [`Request::set_wait_for_ready`] is on.
    pub fn wait_for_ready(&self) -> bool {
        self.extensions.get::<WaitForReady>().is_some()
    }

    /// Maps the message, keeping everything else.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Request<U> {
        Request {
            metadata: self.metadata,
            message: f(self.message),
            extensions: self.extensions,
            timeout: self.timeout,
            addrs: self.addrs,
        }
    }

    /// A request as the server hands it over: with the call's timeout and the
    /// connection's addresses.
    pub(crate) fn received(
        metadata: MetadataMap,
        extensions: Extensions,
        message: T,
        timeout: Option<Duration>,
        addrs: ConnAddrs,
    ) -> Self {
        Request {
            metadata,
            message,
            extensions,
            timeout,
            addrs,
        }
    }

    /// Every part: metadata, extensions, message, timeout, addresses.
    pub(crate) fn into_all(self) -> (MetadataMap, Extensions, T, Option<Duration>, ConnAddrs) {
        (
            self.metadata,
            self.extensions,
            self.message,
            self.timeout,
            self.addrs,
        )
    }
}

/// The request extension that makes a call wait for the channel to connect instead
/// of failing fast: see [`Request::set_wait_for_ready`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitForReady;

/// Anything a generated client method accepts: a message or a `Request` of it.
pub trait IntoRequest<T>: sealed::Sealed {
    /// Wraps into a request.
    fn into_request(self) -> Request<T>;
}

impl<T> IntoRequest<T> for T {
    fn into_request(self) -> Request<T> {
        Request::new(self)
    }
}

impl<T> IntoRequest<T> for Request<T> {
    fn into_request(self) -> Request<T> {
        self
    }
}

/// Anything a generated client method of a client-streaming or bidirectional method
/// accepts, as tonic's: a `Stream` of messages, or a `Request` of one (to carry
/// metadata or a timeout).
pub trait IntoStreamingRequest: sealed::Sealed {
    /// The stream of messages.
    type Stream: futures_util::Stream<Item = Self::Message> + Send + 'static;
    /// The message type.
    type Message;

    /// Wraps into a request.
    fn into_streaming_request(self) -> Request<Self::Stream>;
}

impl<T> IntoStreamingRequest for T
where
    T: futures_util::Stream + Send + 'static,
{
    type Stream = T;
    type Message = T::Item;

    fn into_streaming_request(self) -> Request<Self> {
        Request::new(self)
    }
}

impl<T> IntoStreamingRequest for Request<T>
where
    T: futures_util::Stream + Send + 'static,
{
    type Stream = T;
    type Message = T::Item;

    fn into_streaming_request(self) -> Self {
        self
    }
}

mod sealed {
    pub trait Sealed {}
    impl<T> Sealed for T {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::AsciiMetadataValue;

    #[test]
    fn parts_come_back_in_tonics_order() {
        let mut r = Request::new(7u32);
        r.metadata_mut()
            .insert("k", AsciiMetadataValue::from_static("v"));
        r.extensions_mut().insert(String::from("ext"));
        r.set_timeout(Duration::from_secs(1));
        let r = r.map(|m| m + 1);
        assert_eq!(r.timeout(), Some(Duration::from_secs(1)), "map keeps it");
        assert_eq!(r.extensions().get::<String>().unwrap(), "ext");
        let (md, ext, m) = r.into_parts();
        assert_eq!(m, 8);
        let r = Request::from_parts(md, ext, m);
        assert_eq!(r.metadata().get("k").unwrap().to_str().unwrap(), "v");
        assert_eq!(r.extensions().get::<String>().unwrap(), "ext");
        assert_eq!(r.timeout(), None);
    }

    #[test]
    fn wait_for_ready_is_off_until_set_and_can_be_unset() {
        let mut r = Request::new(());
        assert!(!r.wait_for_ready());
        r.set_wait_for_ready(true);
        assert!(r.wait_for_ready());
        assert!(r.extensions().get::<WaitForReady>().is_some());
        r.set_wait_for_ready(false);
        assert!(!r.wait_for_ready());
    }

    #[test]
    fn a_request_the_client_builds_has_no_addresses() {
        let r = Request::new(());
        assert_eq!((r.remote_addr(), r.local_addr()), (None, None));
        let remote = "127.0.0.1:5000".parse().unwrap();
        let local = "127.0.0.1:7471".parse().unwrap();
        let addrs = ConnAddrs::new(Some(local), Some(remote));
        let r = Request::received(MetadataMap::new(), Extensions::new(), (), None, addrs);
        assert_eq!(
            (r.remote_addr(), r.local_addr()),
            (Some(remote), Some(local))
        );
    }
}
