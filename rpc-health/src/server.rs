//! The statuses the health service reports, and the handle that sets them.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use rpc_core::server::NamedService;
use rpc_core::{Request, Response, Status};

use crate::pb::health_server::{Health, HealthServer};
use crate::pb::{HealthCheckRequest, HealthCheckResponse};
use crate::ServingStatus;

/// A [`HealthReporter`] and the [`HealthServer`] it updates: add the server to a
/// `Server` with `add_service`, and set statuses through the reporter.
pub fn health_reporter() -> (HealthReporter, HealthServer<impl Health>) {
    let reporter = HealthReporter::new();
    let server = HealthServer::new(HealthService::from_health_reporter(reporter.clone()));
    (reporter, server)
}

/// Status by service name. A std lock, not an async one: it is never held across an
/// `.await`, and a `Check` reads it for the time of one hash lookup.
type Statuses = Arc<RwLock<HashMap<String, ServingStatus>>>;

/// Sets the statuses a health service reports. Clones share them with each other and
/// with the [`HealthServer`] they were made with, so a change is seen by the next
/// `Check`, on any connection.
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
        let statuses = HashMap::from([(String::new(), ServingStatus::Serving)]);
        HealthReporter {
            statuses: Arc::new(RwLock::new(statuses)),
        }
    }

    /// Sets the service `S` (by its [`NamedService::NAME`]) to `Serving`.
    pub async fn set_serving<S>(&self)
    where
        S: NamedService,
    {
        self.set_service_status(S::NAME, ServingStatus::Serving)
            .await;
    }

    /// Sets the service `S` (by its [`NamedService::NAME`]) to `NotServing`.
    pub async fn set_not_serving<S>(&self)
    where
        S: NamedService,
    {
        self.set_service_status(S::NAME, ServingStatus::NotServing)
            .await;
    }

    /// Sets the service named `service_name` (`package.Service`, or `""` for the
    /// server as a whole) to `status`.
    pub async fn set_service_status<S>(&self, service_name: S, status: ServingStatus)
    where
        S: AsRef<str>,
    {
        let mut statuses = self
            .statuses
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let name = service_name.as_ref();
        match statuses.get_mut(name) {
            Some(s) => *s = status,
            None => {
                statuses.insert(name.to_owned(), status);
            }
        }
    }

    /// Forgets the service named `service_name`: `Check` ends `NOT_FOUND` for it again.
    pub async fn clear_service_status(&mut self, service_name: &str) {
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
            .copied()
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

#[rpc_core::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.get_ref().service.as_str();
        let Some(status) = self.reporter.status(service) else {
            return Err(Status::not_found(format!(
                "service {service:?} is not registered with the health service"
            )));
        };
        let status = crate::pb::health_check_response::ServingStatus::from(status);
        Ok(Response::new(HealthCheckResponse {
            status: status.into(),
        }))
    }
}
