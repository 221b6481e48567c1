//! The statuses the health service reports, the handle that sets them, and the stream
//! a `Watch` call reads them from.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use rpc_core::server::NamedService;
use rpc_core::{Request, Response, Status};
use tokio::sync::watch;

use crate::pb::health_server::{Health, HealthServer};
use crate::pb::{HealthCheckRequest, HealthCheckResponse};
use crate::ServingStatus;

mod watch_stream;

pub use watch_stream::WatchStream;

/// A [`HealthReporter`] and the [`HealthServer`] it updates: add the server to a
/// `Server` with `add_service`, and set statuses through the reporter.
pub fn health_reporter() -> (HealthReporter, HealthServer<impl Health>) {
    let reporter = HealthReporter::new();
    let server = HealthServer::new(HealthService::from_health_reporter(reporter.clone()));
    (reporter, server)
}

/// Status by service name, each in a watch channel whose receivers are the open
/// `Watch` calls on it. A std lock, not an async one: it is never held across an
/// `.await`, and a call holds it for the time of one hash lookup.
type Statuses = Arc<RwLock<HashMap<String, watch::Sender<ServingStatus>>>>;

/// Sets the statuses a health service reports. Clones share them with each other and
/// with the [`HealthServer`] they were made with, so a change is seen by the next
/// `Check`, and by every open `Watch` of that service, on any connection.
///
/// The methods are `async`, as tonic-health's are, though none of them waits.
#[derive(Clone, Debug)]
pub struct HealthReporter {
    statuses: Statuses,
}

impl HealthReporter {
    /// Statuses where the server as a whole (the service named `""`, as the gRPC
    /// health specification has it) is `Serving`, and no service is known yet.
    pub fn new() -> Self {
        let overall = watch::Sender::new(ServingStatus::Serving);
        HealthReporter {
            statuses: Arc::new(RwLock::new(HashMap::from([(String::new(), overall)]))),
        }
    }

    /// Sets the service `S` (by its [`NamedService::NAME`]) to `Serving`, and tells
    /// its watchers if that is a change.
    pub async fn set_serving<S>(&self)
    where
        S: NamedService,
    {
        self.set_service_status(S::NAME, ServingStatus::Serving)
            .await;
    }

    /// Sets the service `S` (by its [`NamedService::NAME`]) to `NotServing`, and tells
    /// its watchers if that is a change.
    pub async fn set_not_serving<S>(&self)
    where
        S: NamedService,
    {
        self.set_service_status(S::NAME, ServingStatus::NotServing)
            .await;
    }

    /// Sets the service named `service_name` (`package.Service`, or `""` for the
    /// server as a whole) to `status`, and tells its watchers if that is a change
    /// (setting the status it already has sends them nothing).
    pub async fn set_service_status<S>(&self, service_name: S, status: ServingStatus)
    where
        S: AsRef<str>,
    {
        let mut statuses = self
            .statuses
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let name = service_name.as_ref();
        match statuses.get(name) {
            Some(sender) => {
                sender.send_if_modified(|current| {
                    let changed = *current != status;
                    *current = status;
                    changed
                });
            }
            None => {
                statuses.insert(name.to_owned(), watch::Sender::new(status));
            }
        }
    }

    /// Forgets the service named `service_name`: `Check` and new `Watch` calls end
    /// `NOT_FOUND` for it again, and the open `Watch` calls on it end OK.
    pub async fn clear_service_status(&mut self, service_name: &str) {
        // Dropping the sender ends its receivers' streams.
        self.statuses
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(service_name);
    }

    fn status(&self, service_name: &str) -> Option<ServingStatus> {
        self.statuses
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(service_name)
            .map(|sender| *sender.borrow())
    }

    fn subscribe(&self, service_name: &str) -> Option<watch::Receiver<ServingStatus>> {
        self.statuses
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(service_name)
            .map(watch::Sender::subscribe)
    }
}

impl Default for HealthReporter {
    fn default() -> Self {
        Self::new()
    }
}

/// The [`Health`] implementation [`health_reporter`] serves: it reports what a
/// [`HealthReporter`] has set.
#[derive(Debug)]
pub struct HealthService {
    reporter: HealthReporter,
}

impl HealthService {
    /// Reports the statuses `health_reporter` (and its clones) set.
    pub fn from_health_reporter(health_reporter: HealthReporter) -> Self {
        HealthService {
            reporter: health_reporter,
        }
    }
}

fn not_registered(service: &str) -> Status {
    Status::not_found(format!(
        "service {service:?} is not registered with the health service"
    ))
}

#[rpc_core::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.get_ref().service.as_str();
        let status = self
            .reporter
            .status(service)
            .ok_or_else(|| not_registered(service))?;
        Ok(Response::new(HealthCheckResponse::from(status)))
    }

    type WatchStream = WatchStream;

    /// The service's status at once, then each change, until the service is
    /// cleared (the call ends OK) or the server stops. A service the reporter does
    /// not know ends the call `NOT_FOUND`, as tonic-health's does (the gRPC
    /// specification would send `SERVICE_UNKNOWN` and keep the call open).
    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let service = request.get_ref().service.as_str();
        let statuses = self
            .reporter
            .subscribe(service)
            .ok_or_else(|| not_registered(service))?;
        Ok(Response::new(WatchStream::new(statuses)))
    }
}

impl From<ServingStatus> for HealthCheckResponse {
    fn from(status: ServingStatus) -> Self {
        let status = crate::pb::health_check_response::ServingStatus::from(status);
        HealthCheckResponse {
            status: status.into(),
        }
    }
}
