//! Type-2 memory windows of the soft device: entries of the key table
//! (`keys.rs`), bound and invalidated when their WRs are posted (`qp/post.rs`).

use std::sync::Arc;

use crate::error::{Error, Result};

use super::device::Device;
use super::pd::Pd;

/// A soft memory window; dropping it deallocates it (ending any binding) at once.
pub(crate) struct Mw {
    dev: Arc<Device>,
    key: u32,
}

impl Pd {
    pub(crate) fn alloc_mw(&self) -> Result<Mw> {
        if !self.dev.profile.memory_windows() {
            return Err(Error::verb(
                "ibv_alloc_mw",
                std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            ));
        }
        let key = self.dev.keys.insert_mw(self.id);
        Ok(Mw {
            dev: self.dev.clone(),
            key,
        })
    }
}

impl Mw {
    /// The key it was allocated with (unbound: no access through it).
    pub(crate) fn rkey(&self) -> u32 {
        self.key
    }

    /// What a bind WR names it by: its slot in the key table.
    pub(crate) fn handle(&self) -> usize {
        (self.key >> 8) as usize
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        self.dev.keys.remove_mw(self.key >> 8);
    }
}
