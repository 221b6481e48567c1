//! `ServingStatus`: what a `HealthReporter` sets.

use std::fmt;

use crate::pb::health_check_response::ServingStatus as WireStatus;

/// Whether a service is serving, as a [`crate::server::HealthReporter`] sets it
/// (the wire enum, [`crate::pb::health_check_response::ServingStatus`], also has
/// `ServiceUnknown`, which only `Watch` sends).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ServingStatus {
    /// Its status is not known.
    Unknown,
    /// It is up and serving calls.
    Serving,
    /// It is down and not serving calls.
    NotServing,
}

impl fmt::Display for ServingStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServingStatus::Unknown => "Unknown",
            ServingStatus::Serving => "Serving",
            ServingStatus::NotServing => "NotServing",
        })
    }
}

impl From<ServingStatus> for WireStatus {
    fn from(s: ServingStatus) -> WireStatus {
        match s {
            ServingStatus::Unknown => WireStatus::Unknown,
            ServingStatus::Serving => WireStatus::Serving,
            ServingStatus::NotServing => WireStatus::NotServing,
        }
    }
}
