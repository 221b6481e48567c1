//! Static dispatch from the neutral handles to the provider that made them.
//!
//! Each neutral handle holds an enum with one variant per compiled provider; the
//! provider types expose the same inherent methods, so one `match` per call reaches
//! them without a vtable.

/// `dispatch!(expr, Enum, x => body)` runs `body` with `x` bound to the provider
/// object inside the handle enum `Enum`.
macro_rules! dispatch {
    ($value:expr, $enum:ident, $x:ident => $body:expr) => {
        match $value {
            $enum::Soft($x) => $body,
            #[cfg(feature = "rdma")]
            $enum::Verbs($x) => $body,
        }
    };
}

pub(crate) use dispatch;
