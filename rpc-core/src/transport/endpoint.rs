//! `Endpoint`: where to connect and with which settings.

use std::time::Duration;

use crate::handshake::liveness::Keepalive;
use crate::transport::completion::CompletionMode;
use crate::transport::{
    Error, DEFAULT_CREDITS, DEFAULT_MAX_MESSAGE, DEFAULT_RC_RETRY, DEFAULT_SLOT_SIZE,
};

/// Where and how to connect: `rdma://host:port` (RC) or `rdma+ud://host:port` (UD,
/// see [the transport docs](crate::transport#ud-transport)) plus settings, as tonic's
/// `Endpoint`.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) settings: Settings,
    /// The address as given.
    pub(crate) uri: http::Uri,
    /// Why this endpoint cannot connect, for one made infallibly from a URI that is
    /// not an rdma-rpc address (`From<Uri>`): its connects fail `invalid URI`.
    pub(crate) invalid: Option<String>,
}

/// Connection settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) credits: u32,
    pub(crate) slot_size: usize,
    pub(crate) max_message: usize,
    pub(crate) timeout: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) mode: CompletionMode,
    pub(crate) device: Option<String>,
    pub(crate) rdma_device: Option<rpc_transport::Device>,
    pub(crate) ud: bool,
    pub(crate) ud_window: u32,
    pub(crate) rc_retry: rpc_transport::RcRetry,
    pub(crate) keepalive_interval: Option<Duration>,
    pub(crate) keepalive_timeout: Duration,
    /// Whether keepalive PINGs go while no call is in flight.
    pub(crate) keepalive_while_idle: bool,
    /// The handshake connection's TCP options.
    pub(crate) tcp: crate::transport::tcp_options::TcpOptions,
    pub(crate) concurrency_limit: Option<usize>,
    pub(crate) rate_limit: Option<(u64, Duration)>,
    /// Bodies longer than this go by reference (RC, RDMA Read agreed).
    pub(crate) rendezvous_threshold: usize,
    /// Registered bytes each connection's pool may hold.
    pub(crate) rendezvous_pool_bytes: usize,
    /// Where the pools' occupancy is reported, if anyone reads it.
    pub(crate) rendezvous_stats: Option<crate::transport::RendezvousStats>,
    /// `Endpoint::user_agent`: the `user-agent` entry every call carries.
    pub(crate) user_agent: Option<crate::metadata::AsciiMetadataValue>,
    /// `Endpoint::local_address`: the handshake connection binds it before dialling.
    pub(crate) local_address: Option<std::net::IpAddr>,
    /// `Endpoint::initial_stream_window_size`: what each streaming call lets the
    /// server send ahead of its reader.
    pub(crate) stream_window: u32,
}

impl Settings {
    /// The client's keepalive, if its interval is set.
    pub(crate) fn keepalive(&self) -> Option<Keepalive> {
        self.keepalive_interval.map(|interval| Keepalive {
            interval,
            timeout: self.keepalive_timeout,
        })
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            credits: DEFAULT_CREDITS,
            slot_size: DEFAULT_SLOT_SIZE,
            max_message: DEFAULT_MAX_MESSAGE,
            timeout: None,
            connect_timeout: Duration::from_secs(10),
            mode: CompletionMode::default(),
            device: None,
            rdma_device: None,
            ud: false,
            ud_window: 32,
            rc_retry: DEFAULT_RC_RETRY,
            keepalive_interval: None,
            keepalive_timeout: Duration::from_secs(20),
            keepalive_while_idle: false,
            tcp: Default::default(),
            concurrency_limit: None,
            rate_limit: None,
            rendezvous_threshold: crate::transport::DEFAULT_RENDEZVOUS_THRESHOLD,
            rendezvous_pool_bytes: crate::transport::rendezvous::DEFAULT_CLIENT_POOL_BYTES,
            rendezvous_stats: None,
            user_agent: None,
            local_address: None,
            stream_window: crate::engine::wire::STREAM_WINDOW,
        }
    }
}

impl Endpoint {
    /// Parses `rdma://host:port` (RC) or `rdma+ud://host:port` (UD).
    pub fn from_shared(uri: impl Into<String>) -> Result<Endpoint, Error> {
        let uri = uri.into();
        let (ud, rest) = match uri.strip_prefix("rdma+ud://") {
            Some(r) => (true, Some(r)),
            None => (false, uri.strip_prefix("rdma://")),
        };
        let rest = rest.ok_or_else(|| {
            Error::invalid_uri(format!(
                "{uri:?} is not an rdma://host:port or rdma+ud://host:port address"
            ))
        })?;
        let rest = rest.trim_end_matches('/');
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| Error::invalid_uri(format!("{uri:?} has no port")))?;
        let port: u16 = port
            .parse()
            .map_err(|_| Error::invalid_uri(format!("{uri:?} has a bad port")))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(Error::invalid_uri(format!("{uri:?} has no host")));
        }
        let parsed = uri
            .parse()
            .map_err(|e| Error::invalid_uri(format!("{uri:?}: {e}")))?;
        Ok(Endpoint {
            host: host.to_string(),
            port,
            settings: Settings {
                ud,
                ..Settings::default()
            },
            uri: parsed,
            invalid: None,
        })
    }

    /// An endpoint from anything that converts to one (a `&'static str`, a `String`,
    /// an `Endpoint`), as tonic's `Endpoint::new`.
    pub fn new<D>(dst: D) -> Result<Endpoint, Error>
    where
        D: TryInto<Endpoint>,
        D::Error: Into<crate::codegen::StdError>,
    {
        dst.try_into()
            .map_err(|e| crate::codegen::endpoint_error(e.into()))
    }

    /// The connect timeout, as tonic's (here always set: default 10 s).
    pub fn get_connect_timeout(&self) -> Option<Duration> {
        Some(self.settings.connect_timeout)
    }

    /// Parses a constant address, as [`Endpoint::from_shared`].
    ///
    /// # Panics
    /// If `uri` is not an `rdma://host:port` or `rdma+ud://host:port` address, as
    /// tonic's `from_static` panics on an invalid URI.
    pub fn from_static(uri: &'static str) -> Endpoint {
        match Endpoint::from_shared(uri) {
            Ok(endpoint) => endpoint,
            Err(e) => panic!("Endpoint::from_static: {e:?}"),
        }
    }

    /// A timeout for every call on the channel, as tonic's: a request's own
    /// timeout (`Request::set_timeout`) applies when it is smaller.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.settings.timeout = Some(t);
        self
    }

    /// How long connecting may take.
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.settings.connect_timeout = t;
        self
    }

    /// At most `limit` calls in flight on the channel at once, as tonic's: shared by
    /// the channel's clones; a call beyond it waits in `poll_ready` (it never fails
    /// for it) until one ends. In a balanced channel, per endpoint. Independent of
    /// [`Endpoint::credits`], which the server grants.
    pub fn concurrency_limit(mut self, limit: usize) -> Self {
        self.settings.concurrency_limit = Some(limit);
        self
    }

    /// At most `limit` calls start per `duration`, as tonic's (tower's `RateLimit`):
    /// shared by the channel's clones; a call beyond it waits in `poll_ready` until
    /// the next window. In a balanced channel, per endpoint.
    pub fn rate_limit(mut self, limit: u64, duration: Duration) -> Self {
        self.settings.rate_limit = Some((limit, duration));
        self
    }

    /// Calls (more exactly: frames) in flight at once on the connection; the server
    /// may grant fewer. One more credit is asked for CANCEL frames.
    pub fn credits(mut self, n: u32) -> Self {
        self.settings.credits = n.max(1);
        self
    }

    /// Largest message sent or accepted (beyond: `RESOURCE_EXHAUSTED`).
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.settings.max_message = bytes;
        self
    }

    /// Request bodies longer than `bytes` travel by reference on RC: encoded once
    /// into registered memory and pulled by the server with RDMA Read, instead of
    /// in 8 KiB fragments (default [`crate::transport::DEFAULT_RENDEZVOUS_THRESHOLD`];
    /// `usize::MAX`: never). The client's stream messages longer than `bytes` go
    /// the same way, one frame each. Responses and server stream messages by
    /// reference are read whatever this says. UD keeps one datagram per message.
    /// See `docs/large-messages.md`.
    pub fn rendezvous_threshold(mut self, bytes: usize) -> Self {
        self.settings.rendezvous_threshold = bytes;
        self
    }

    /// Registered memory each connection may hold for bodies by reference: at most
    /// `bytes`, half for requests lent and half for responses read (so a call
    /// waiting to send never holds what a call in flight needs to finish),
    /// registered as used and reused. A call that finds no room waits its turn; a
    /// body larger than its half fails `RESOURCE_EXHAUSTED` naming the limit.
    /// Default [`crate::transport::DEFAULT_CLIENT_POOL_BYTES`] (160 MiB).
    pub fn rendezvous_pool_bytes(mut self, bytes: usize) -> Self {
        self.settings.rendezvous_pool_bytes = bytes;
        self
    }

    /// Reports the occupancy of this channel's registered-memory pools to `stats`.
    pub fn rendezvous_stats(mut self, stats: crate::transport::RendezvousStats) -> Self {
        self.settings.rendezvous_stats = Some(stats);
        self
    }

    /// How completions are reaped.
    pub fn completion_mode(mut self, mode: CompletionMode) -> Self {
        self.settings.mode = mode;
        self
    }

    /// Opens this RDMA device instead of the default one (`soft0`, or a verbs name).
    pub fn device(mut self, name: impl Into<String>) -> Self {
        self.settings.device = Some(name.into());
        self
    }

    /// Uses this already opened device (e.g. a soft device whose UD faults a test
    /// sets, or one device shared by many channels) instead of opening one.
    pub fn rdma_device(mut self, dev: rpc_transport::Device) -> Self {
        self.settings.rdma_device = Some(dev);
        self
    }

    /// Calls over UD (as `rdma+ud://`) or RC (as `rdma://`).
    pub fn ud(mut self, yes: bool) -> Self {
        self.settings.ud = yes;
        self
    }

    /// PING the server every `interval` on the connection's liveness channel
    /// (tonic's name; no HTTP/2 here: the ping travels on the handshake connection),
    /// and declare it gone when a PING goes unanswered for the keepalive timeout
    /// (default 20 s): its calls end `UNAVAILABLE` and the channel dials again. Off
    /// by default, as gRPC's client keepalive.
    pub fn http2_keep_alive_interval(mut self, interval: Duration) -> Self {
        self.settings.keepalive_interval = Some(interval);
        self
    }

    /// How long a keepalive PING may go unanswered (default 20 s); takes effect with
    /// [`Endpoint::http2_keep_alive_interval`].
    pub fn keep_alive_timeout(mut self, timeout: Duration) -> Self {
        self.settings.keepalive_timeout = timeout;
        self
    }

    /// Whether keepalive PINGs go while the connection has no call in flight
    /// (default `false`, as tonic's and gRPC's: an idle connection is not pinged,
    /// so a server that went away is found at the next call); takes effect with
    /// [`Endpoint::http2_keep_alive_interval`].
    pub fn keep_alive_while_idle(mut self, enabled: bool) -> Self {
        self.settings.keepalive_while_idle = enabled;
        self
    }

    /// Every call of the channel carries `user-agent: <user_agent> rdma-rpc/<version>`
    /// in its metadata (tonic's knob, which sends it as a header; a call's own
    /// `user-agent` comes first). Without it, calls carry none. Fails if
    /// `user_agent` is not a valid header value.
    pub fn user_agent<T>(mut self, user_agent: T) -> Result<Self, Error>
    where
        T: TryInto<http::HeaderValue>,
    {
        let ua = user_agent
            .try_into()
            .ok()
            .and_then(|v| {
                v.to_str()
                    .ok()
                    .and_then(crate::transport::user_agent::value)
            })
            .ok_or_else(|| Error::invalid_user_agent("not a visible-ASCII header value"))?;
        self.settings.user_agent = Some(ua);
        Ok(self)
    }

    /// The RC transport retry budget (ACK timeout code and retransmissions): how
    /// long the server may stop answering before the connection is declared dead.
    /// Default: code 17 and 7, about 4.3 s.
    pub fn rc_retry(mut self, retry: rpc_transport::RcRetry) -> Self {
        self.settings.rc_retry = retry;
        self
    }

    /// UD calls outstanding at once (default 32; the server may grant fewer).
    pub fn ud_window(mut self, n: u32) -> Self {
        self.settings.ud_window = n.clamp(1, 1 << 16);
        self
    }
}

/// `"rdma://host:port".try_into()`, as tonic's; what a generated client's `connect`
/// takes.
impl TryFrom<&'static str> for Endpoint {
    type Error = Error;

    fn try_from(uri: &'static str) -> Result<Endpoint, Error> {
        Endpoint::from_shared(uri)
    }
}

/// `"rdma://host:port".parse()`, as tonic's.
impl std::str::FromStr for Endpoint {
    type Err = Error;

    fn from_str(uri: &str) -> Result<Endpoint, Error> {
        Endpoint::from_shared(uri.to_string())
    }
}

/// An address built at run time, as tonic's.
impl TryFrom<String> for Endpoint {
    type Error = Error;

    fn try_from(uri: String) -> Result<Endpoint, Error> {
        Endpoint::from_shared(uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rdma_addresses_and_refuses_others() {
        let e = Endpoint::from_shared("rdma://127.0.0.1:7471").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 7471));
        let e = Endpoint::from_shared("rdma://[::1]:9/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 9));
        assert!(Endpoint::from_shared("http://127.0.0.1:1").is_err());
        assert!(Endpoint::from_shared("rdma://127.0.0.1").is_err());
        assert!(Endpoint::from_shared("rdma://:80").is_err());
        let e = Endpoint::from_shared("rdma+ud://10.0.0.1:7471").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.settings.ud),
            ("10.0.0.1", 7471, true)
        );
        assert!(!Endpoint::from_shared("rdma://h:1").unwrap().settings.ud);
        assert!(Endpoint::from_shared("rdma+udp://h:1").is_err());
    }

    #[test]
    fn constant_and_owned_addresses_convert_as_tonic_s() {
        let e = Endpoint::from_static("rdma+ud://10.0.0.1:7471");
        assert_eq!(
            (e.host.as_str(), e.port, e.settings.ud),
            ("10.0.0.1", 7471, true)
        );
        let e: Endpoint = "rdma://h:9".try_into().unwrap();
        assert_eq!((e.host.as_str(), e.port), ("h", 9));
        let e = Endpoint::try_from(format!("rdma://h:{}", 10)).unwrap();
        assert_eq!(e.port, 10);
        let err = Endpoint::try_from("http://h:1").unwrap_err();
        assert_eq!(err.to_string(), "invalid URI", "tonic's words");
        assert!(format!("{err:?}").contains("not an rdma://"), "{err:?}");
    }

    #[test]
    #[should_panic(expected = "Endpoint::from_static")]
    fn from_static_panics_on_a_bad_address() {
        let _ = Endpoint::from_static("h:1");
    }
}
