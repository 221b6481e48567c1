//! Services by name, as the server routes calls to them.

use std::collections::HashMap;
use std::sync::Mutex;

use tower::util::BoxCloneService;

use crate::server::{ServerCall, ServerReply};
use crate::status::Status;
use crate::transport::lock;

type BoxService = BoxCloneService<ServerCall, ServerReply, Status>;

/// Services by `NamedService::NAME`. A `Mutex` only because a boxed service is not
/// `Sync`; it is held for one clone per call, never across the call.
#[derive(Default)]
pub(crate) struct Routes(pub(super) HashMap<&'static str, Mutex<BoxService>>);

impl Routes {
    pub(crate) fn get(&self, name: &str) -> Option<BoxService> {
        self.0.get(name).map(|s| lock(s).clone())
    }
}
