//! Fixtures shared by every conformance test: opening the provider under test,
//! connecting queue pairs, and waiting for completions with a deadline.

pub mod caps;
pub mod child;
pub mod host;
pub mod link;
pub mod pattern;
pub mod post;
pub mod quirks;
pub mod rc;
pub mod ud;
pub mod wait;

pub use caps::{has_atomics_or_refuses, has_imm_or_refuses, has_ud_or_refuses_it};
pub use host::Host;
pub use pattern::pattern;
pub use post::{assert_refused, post_recv, post_send};
pub use rc::{RcOpts, RcPair, RcSide};
pub use ud::{UdPair, UdSide, QKEY};
pub use wait::{wait_event, wait_state, wait_wc, wait_wcs, DEADLINE};
