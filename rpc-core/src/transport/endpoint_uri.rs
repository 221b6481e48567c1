//! An [`Endpoint`] as an `http::Uri`, as tonic's `Endpoint::uri`, `From<Uri>` and
//! `Channel::builder`. A URI that is not an `rdma://` or `rdma+ud://` address still
//! makes an endpoint (the conversion cannot fail, as tonic's), whose connects then
//! fail `invalid URI` with the reason.

use http::Uri;

use super::endpoint::Settings;
use super::{Channel, Endpoint, Error};

impl Endpoint {
    /// The address it was made from.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// `invalid URI` for an endpoint made from a URI that is not an rdma-rpc
    /// address: checked before any connect.
    pub(crate) fn check_uri(&self) -> Result<(), Error> {
        match &self.invalid {
            Some(why) => Err(Error::invalid_uri(why.clone())),
            None => Ok(()),
        }
    }
}

impl From<Uri> for Endpoint {
    fn from(uri: Uri) -> Endpoint {
        Endpoint::from_shared(uri.to_string()).unwrap_or_else(|e| {
            let why = e.reason();
            Endpoint {
                host: String::new(),
                port: 0,
                settings: Settings::default(),
                uri,
                invalid: Some(why),
            }
        })
    }
}

impl Channel {
    /// An endpoint for `uri`, to configure and then connect, as tonic's.
    pub fn builder(uri: Uri) -> Endpoint {
        Endpoint::from(uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_keeps_its_uri_and_a_foreign_one_is_refused_at_connect() {
        let e = Channel::builder("rdma://127.0.0.1:7471".parse().unwrap());
        assert_eq!(e.uri().to_string(), "rdma://127.0.0.1:7471/");
        assert_eq!(
            (e.host.as_str(), e.port, e.invalid.as_deref()),
            ("127.0.0.1", 7471, None)
        );
        let e = Endpoint::from("http://[::1]:50051".parse::<Uri>().unwrap());
        assert!(
            e.invalid
                .as_deref()
                .is_some_and(|w| w.contains("not an rdma://")),
            "{:?}",
            e.invalid
        );
        assert_eq!(e.uri().host(), Some("[::1]"));
    }

    #[tokio::test]
    async fn connecting_a_foreign_uri_fails_invalid_uri() {
        let e = Endpoint::from("http://127.0.0.1:1".parse::<Uri>().unwrap());
        let err = e.connect().await.unwrap_err();
        assert_eq!(err.to_string(), "invalid URI");
        assert!(format!("{err:?}").contains("not an rdma://"), "{err:?}");
    }
}
