//! Protection domains, memory registrations and address handles.

use std::net::SocketAddrV4;
use std::sync::Arc;

use crate::access::AccessFlags;
use crate::ah::AhAttr;
use crate::error::Result;
use crate::mr_buffer::MrBuffer;

use super::device::Device;

/// A soft protection domain: an id that every key check compares.
pub(crate) struct Pd {
    pub(crate) dev: Arc<Device>,
    pub(crate) id: u32,
}

/// A soft memory registration; dropping it invalidates its key at once.
pub(crate) struct Mr {
    dev: Arc<Device>,
    key: u32,
}

/// A soft address handle: the UDP address of the destination device.
pub(crate) struct Ah {
    pub(crate) addr: SocketAddrV4,
}

impl Pd {
    pub(crate) fn register(&self, buf: Arc<MrBuffer>, access: AccessFlags) -> Result<Mr> {
        let key = self.dev.keys.insert(buf, self.id, access);
        Ok(Mr {
            dev: self.dev.clone(),
            key,
        })
    }

    pub(crate) fn create_ah(self: &Arc<Self>, attr: &AhAttr) -> Result<Arc<Ah>> {
        let (addr, _) = super::lid::route(attr)?;
        Ok(Arc::new(Ah { addr }))
    }
}

impl Mr {
    pub(crate) fn lkey(&self) -> u32 {
        self.key
    }

    pub(crate) fn rkey(&self) -> u32 {
        self.key
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        self.dev.keys.remove(self.key);
    }
}
