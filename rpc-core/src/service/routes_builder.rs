//! Building a [`Routes`] table apart from a server, as tonic's `Routes::new`,
//! `Routes::builder` and `RoutesBuilder` (e.g. services chosen at run time), for
//! `Server::add_routes`.

use super::Routes;
use crate::server::RoutableService;

impl Routes {
    /// A table with one service.
    pub fn new<S: RoutableService>(svc: S) -> Self {
        Routes::default().add_service(svc)
    }

    /// A builder that adds services through `&mut`.
    pub fn builder() -> RoutesBuilder {
        RoutesBuilder::default()
    }

    /// The table with `svc` added (replacing a service of the same name).
    pub fn add_service<S: RoutableService>(mut self, svc: S) -> Self {
        self.add(svc);
        self
    }

    /// The table as it is: tonic prepares its axum router here; this table needs
    /// nothing.
    pub fn prepare(self) -> Self {
        self
    }
}

/// Adds services to a [`Routes`] through `&mut self`, as tonic's `RoutesBuilder`.
#[derive(Debug, Default, Clone)]
pub struct RoutesBuilder {
    routes: Routes,
}

impl RoutesBuilder {
    /// Adds `svc` (replacing a service of the same name).
    pub fn add_service<S: RoutableService>(&mut self, svc: S) -> &mut Self {
        self.routes.add(svc);
        self
    }

    /// The table built.
    pub fn routes(self) -> Routes {
        self.routes
    }
}

impl From<Routes> for RoutesBuilder {
    fn from(routes: Routes) -> Self {
        RoutesBuilder { routes }
    }
}
