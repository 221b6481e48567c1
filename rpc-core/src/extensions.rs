//! `Extensions`: a type map of values that travel with a request or a response inside
//! one process (an interceptor's findings for the handler, a layer's for the caller),
//! never on the wire.
//!
//! It is `http::Extensions` itself, as in tonic 0.14 (`tonic::Extensions` is a
//! re-export of it): a value put there by tower or http middleware is the same value
//! a handler reads, and a ported program names the same type. Values are keyed by
//! their type and must be `Clone + Send + Sync + 'static`; cloning the map clones
//! every value.
//!
//! ```
//! use rpc_core::Extensions;
//!
//! #[derive(Clone, Debug, PartialEq)]
//! struct User(&'static str);
//!
//! let mut ext = Extensions::new();
//! assert!(ext.insert(User("alice")).is_none());
//! assert_eq!(ext.get::<User>(), Some(&User("alice")));
//! assert_eq!(ext.remove::<User>(), Some(User("alice")));
//! assert!(ext.is_empty());
//! ```

pub use http::Extensions;
